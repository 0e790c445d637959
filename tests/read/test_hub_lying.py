"""A lying Hub on 127.0.0.1 (issue 27): a server that answers what no Hub would. A commit sha that is a path, a link
planted at the cache file; replies that stall after their headers, never start, drip their headers or body a byte at
a time; bodies larger than any cap (undeclared, or declared in Content-Length), a brotli body; a file list of the
wrong types or with names that are paths; range replies longer than the range; redirects to another port, in a
loop, to a closed port or to `file://`.

Every case ends within its deadline (small ones here: CKPT_HUB_REQUEST_TIMEOUT=1, CKPT_HUB_DEADLINE=4, each case
well under a few seconds, where today's code runs for a minute or more) with a one-line error or the right verdict,
and nothing outside the cache is touched: a sentinel file outside it keeps its bytes (checked after every test), and
the cache holds only the names ckpt gives its files. The CLI runs in a subprocess with the real huggingface_hub
client; the variants of one behaviour run in process, through `HubSource`, which is what the CLI calls."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from ckpt_tools.errors import TargetError, UsageError
from ckpt_tools.read.hub import INFO_LIMIT, HubSource
from ckpt_tools.read.hub_http import Deadlines
from ckpt_tools.read.hub_target import HubTarget
from ckpt_tools.read.loader import load_checkpoint
from tests.corrupt import GENUINE
from tests.fake_hub import HubServer, write_settings
from tests.hub_repos import link_repo
from tests.read.test_hub import ckpt, local_verdict, verdict

BASE = "base-llama-bf16"
SHARD = "model.safetensors"
SENTINEL = b"precious bytes that are not a range cache\n"
REQUEST, COMMAND = 1.0, 4.0  # the deadlines every case runs under
SLACK = 3.0  # a subprocess's start (Python, imports) on a busy machine, on top of the deadline
DEADLINES = {"CKPT_HUB_REQUEST_TIMEOUT": str(REQUEST), "CKPT_HUB_DEADLINE": str(COMMAND)}
pytestmark = pytest.mark.skipif(not (GENUINE / BASE).exists(), reason="fixtures/genuine is not present")

LIES = {  # repo -> the `lie` settings of its server: how its replies misbehave
    "acme/info-stall": {"info": ["stall", 60]},
    "acme/info-silent": {"info": ["silent", 60]},
    "acme/info-drip": {"info": ["drip", 0.2]},
    "acme/info-drip-headers": {"info": ["drip-headers", 0.2]},
    "acme/config-drip": {"config.json": ["drip", 0.2]},
    "acme/shard-stall": {SHARD: ["stall", 60]},
    "acme/shard-drip": {SHARD: ["drip", 0.2]},
    "acme/info-flood": {"info": ["flood", 4 * INFO_LIMIT]},
    "acme/info-huge-length": {"info": ["huge-length", 10**12]},
    "acme/info-brotli": {"info": ["encoding", "br"]},
    "acme/shard-chunked-more": {SHARD: ["chunked-more"]},
    "acme/shard-huge-length": {SHARD: ["huge-length", 10**12]},
    "acme/info-loop": {"info": ["redirect", "self"]},
    "acme/info-to-file": {"info": ["redirect", "file:///etc/passwd"]},
    "acme/info-to-closed-port": {"info": ["redirect", "http://127.0.0.1:1/api/models/acme/plain"]},
}
ONE_SIBLING = {"rfilename": SHARD, "size": 855440}
WRONG_TYPES = {  # repo -> (what its model info says instead, what the one-line error says)
    "acme/siblings-string": ({"siblings": SHARD}, "a file list (`siblings`) that is a str"),
    "acme/sibling-list": ({"siblings": [[SHARD, 855440]]}, "a file list entry that is a list"),
    "acme/size-string": ({"siblings": [{**ONE_SIBLING, "size": "855440"}]}, "'855440' as the size"),
    "acme/size-negative": ({"siblings": [{**ONE_SIBLING, "size": -1}]}, "-1 as the size"),
    "acme/size-float": ({"siblings": [{**ONE_SIBLING, "size": 1.5}]}, "1.5 as the size"),
    "acme/size-bool": ({"siblings": [{**ONE_SIBLING, "size": True}]}, "True as the size"),
    "acme/size-huge": ({"siblings": [{**ONE_SIBLING, "size": 2**64}]}, "as the size"),
    "acme/lfs-string": ({"siblings": [{**ONE_SIBLING, "lfs": "x"}]}, "LFS details"),
    "acme/name-number": ({"siblings": [{"rfilename": 5, "size": 1}]}, "not a string but a int"),
    "acme/name-dotdot": ({"siblings": [{"rfilename": "../model.safetensors", "size": 1}]}, "`..` path segment"),
    "acme/name-deep-dotdot": ({"siblings": [{"rfilename": "a/../../x", "size": 1}]}, "`..` path segment"),
    "acme/name-absolute": ({"siblings": [{"rfilename": "/etc/passwd", "size": 1}]}, "an absolute path"),
    "acme/name-nul": ({"siblings": [{"rfilename": "a\x00.safetensors", "size": 1}]}, "control character"),
    "acme/name-backslash": ({"siblings": [{"rfilename": "..\\x", "size": 1}]}, "backslash"),
    "acme/name-empty": ({"siblings": [{"rfilename": "", "size": 1}]}, "(empty)"),
    "acme/name-twice": ({"siblings": [ONE_SIBLING, ONE_SIBLING]}, "twice in the file list"),
    "acme/sha-null": ({"sha": None}, "the Hub did not say which commit"),
}


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder outside every cache, with the sentinel a lying sha aims at."""
    folder = tmp_path_factory.mktemp("outside")
    (folder / "victim.ranges").write_bytes(SENTINEL)
    return folder


@pytest.fixture(autouse=True)
def sentinel_untouched(outside: Path):
    yield
    assert (outside / "victim.ranges").read_bytes() == SENTINEL
    assert sorted(p.name for p in outside.iterdir()) == ["victim.ranges"]


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
def root(tmp_path_factory: pytest.TempPathFactory, outside: Path) -> Path:
    root = tmp_path_factory.mktemp("lying-hub")
    link_repo(GENUINE / BASE, root / "acme" / "plain")
    for repo, sha in lying_shas(outside).items():
        write_settings(link_repo(GENUINE / BASE, root / repo), info={"sha": sha})
    for repo, lie in LIES.items():
        write_settings(link_repo(GENUINE / BASE, root / repo), lie=lie)
    for repo, (info, _) in WRONG_TYPES.items():
        write_settings(link_repo(GENUINE / BASE, root / repo), info=info)
    for repo in ("acme/info-elsewhere", "acme/shard-elsewhere"):
        link_repo(GENUINE / BASE, root / repo)  # their redirects need the other server's port: set in `other`
    return root


@pytest.fixture(scope="module")
def hub(root: Path):
    with HubServer(root) as srv:
        yield srv


@pytest.fixture(scope="module")
def other(root: Path, hub: HubServer):
    """A second server on another port of 127.0.0.1 (another origin), serving the same repos."""
    with HubServer(root) as srv:
        write_settings(
            root / "acme/info-elsewhere", lie={"info": ["redirect", f"{srv.url}/api/models/acme/plain?blobs=true"]}
        )
        shard = f"{srv.url}/acme/plain/resolve/{hub.commit('acme/plain')}/{SHARD}"
        write_settings(root / "acme/shard-elsewhere", lie={SHARD: ["redirect", shard]})
        yield srv


def run(srv: HubServer, home: Path, *args: str, timeout: float = 30, **env: str) -> subprocess.CompletedProcess[str]:
    """`ckpt ARGS` pointed at `srv` (test_hub.ckpt), with a shorter limit: every lie must end within its deadline."""
    return ckpt(srv, home, *args, timeout=timeout, **env)


def timed_run(srv: HubServer, home: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """`run` under the small deadlines; killed well before a lying server would give up on its own."""
    t0 = time.monotonic()
    result = run(srv, home, *args, timeout=COMMAND + 15, **{**DEADLINES, **env})
    return result, time.monotonic() - t0


def open_repo(srv: HubServer, repo: str, cache: Path, request: float = REQUEST, command: float = COMMAND) -> HubSource:
    """The CLI's reader, in process: model info at once, then whatever `load_checkpoint` asks for."""
    return HubSource(
        HubTarget(repo, None), endpoint=srv.url, token=False, cache_dir=cache, deadlines=Deadlines(request, command)
    )


def cache_names(home: Path) -> set[str]:
    """Every entry under the assets cache (HF_HOME/assets), relative to it, links included."""
    assets = home / "assets"
    return {str(p.relative_to(assets)) for p in assets.rglob("*")} if assets.exists() else set()


def assert_only_cache_files(home: Path, srv: HubServer) -> None:
    """The cache holds ckpt's folders and `<40 hex>.ranges` files, nothing else."""
    allowed = re.compile(rf"ckpt-tools(/models--acme--[a-z-]+(/127\.0\.0\.1_{srv.port}(/[0-9a-f]{{40}}\.ranges)?)?)?")
    assert all(allowed.fullmatch(name) for name in cache_names(home)), cache_names(home)


def cache_folder(srv: HubServer, home: Path, repo: str) -> Path:
    return home / "assets" / "ckpt-tools" / ("models--" + repo.replace("/", "--")) / f"127.0.0.1_{srv.port}"


def assert_one_line_error(run: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert run.returncode == 2, (run.returncode, run.stderr)
    assert run.stderr.startswith("ckpt: ") and run.stderr.count("\n") == 1, run.stderr
    assert "internal error" not in run.stderr and "Traceback" not in run.stderr, run.stderr
    for needle in needles:
        assert needle in run.stderr, run.stderr


def one_line(exc: pytest.ExceptionInfo[BaseException], *needles: str) -> None:
    message = str(exc.value)
    assert "\n" not in message, message
    for needle in needles:
        assert needle in message, message


# ---- the commit sha names the cache file ----------------------------------------------------------------------------
@pytest.mark.parametrize("repo", sorted(lying_shas(Path("/x"))))
def test_a_commit_sha_that_is_not_40_hex_digits_is_refused_and_nothing_is_written(hub, outside, tmp_path, repo):
    start = len(hub.log)
    result = run(hub, tmp_path, "doctor", repo)
    assert_one_line_error(result, "as the commit sha, which is not 40 hex digits")
    assert (outside / "victim.ranges").read_bytes() == SENTINEL
    assert sorted(p.name for p in outside.iterdir()) == ["victim.ranges"]
    assert cache_names(tmp_path) == set()  # refused before any cache folder or file exists
    assert not any("/resolve/" in r.path for r in hub.requests(start)), "a lying sha must not pin any read"


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


# ---- time: one deadline per request, one per command ----------------------------------------------------------------
@pytest.mark.parametrize(
    "repo, what",
    [
        ("acme/info-stall", "the model info"),  # headers, then nothing for 60 s
        ("acme/info-drip", "the model info"),  # a byte every 0.2 s: each one resets a read timeout
        ("acme/shard-drip", f"{SHARD} (bytes 0-"),
    ],
)
def test_a_stalling_or_dripping_reply_ends_at_the_request_deadline(hub, tmp_path, repo, what):
    result, seconds = timed_run(hub, tmp_path, "doctor", repo)
    assert_one_line_error(result, what, f"within {REQUEST:g} s (the per-request deadline, CKPT_HUB_REQUEST_TIMEOUT)")
    assert seconds < REQUEST + SLACK, seconds
    assert_only_cache_files(tmp_path, hub)


@pytest.mark.parametrize(
    "repo", ["acme/info-silent", "acme/info-drip-headers", "acme/config-drip", "acme/shard-stall", "acme/info-stall"]
)
def test_every_way_of_not_finishing_ends_at_the_request_deadline(hub, tmp_path, repo):
    """In process: no answer at all, headers dripped a byte at a time, a config file dripped, a shard stalled."""
    start = len(hub.log)
    t0 = time.monotonic()
    with pytest.raises(TargetError) as err:
        load_checkpoint(open_repo(hub, repo, tmp_path / "cache"))
    assert time.monotonic() - t0 < REQUEST + 0.5
    one_line(err, "(the per-request deadline, CKPT_HUB_REQUEST_TIMEOUT)")
    assert len([r for r in hub.requests(start) if r.path.endswith(("/config.json", SHARD))]) <= 2  # not retried


def test_the_command_deadline_bounds_the_sum_of_requests(root, tmp_path):
    """Every reply comes in 0.4 s, well inside the request deadline; together they pass the command's 1 s."""
    with HubServer(root, delay=0.4) as slow:
        result, seconds = timed_run(
            slow, tmp_path, "doctor", "acme/plain", CKPT_HUB_REQUEST_TIMEOUT="10", CKPT_HUB_DEADLINE="1"
        )
    assert_one_line_error(result, "took more than 1 s in all (the command's deadline, CKPT_HUB_DEADLINE)")
    assert seconds < 1 + SLACK, seconds


def test_the_command_deadline_is_also_each_request_s(hub, tmp_path):
    with pytest.raises(TargetError) as err:
        open_repo(hub, "acme/info-stall", tmp_path, request=30, command=0.5)
    one_line(err, "took more than 0.5 s in all (the command's deadline, CKPT_HUB_DEADLINE)")


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", ""])
def test_deadline_settings_are_checked(value):
    env = {"CKPT_HUB_DEADLINE": value}
    if not value:
        assert Deadlines.from_env(env) == Deadlines()
        return
    with pytest.raises(UsageError, match=r"CKPT_HUB_DEADLINE=.*expected a number of seconds greater than 0"):
        Deadlines.from_env(env)


def test_a_bad_deadline_setting_is_a_one_line_error(hub, tmp_path):
    assert_one_line_error(run(hub, tmp_path, "doctor", "acme/plain", CKPT_HUB_REQUEST_TIMEOUT="soon"), "soon")


# ---- bytes: every body read from the server is capped ---------------------------------------------------------------
def test_an_endless_model_info_is_cut_at_its_cap(hub, tmp_path):
    result, seconds = timed_run(hub, tmp_path, "doctor", "acme/info-flood")
    assert_one_line_error(result, f"the model info: the server sent more, over the {INFO_LIMIT:,}-byte cap")
    sent = hub.lie_bytes.get("/api/models/acme/info-flood?blobs=true", 0)
    assert INFO_LIMIT <= sent <= INFO_LIMIT + 16 * 1024 * 1024, sent  # socket buffers hold a few MiB more
    assert seconds < COMMAND + SLACK


@pytest.mark.parametrize(
    "repo, needles",
    [
        ("acme/info-huge-length", ["declared 1,000,000,000,000 bytes, over the", "-byte cap"]),
        ("acme/info-brotli", ["'br'-encoded body, asked for identity"]),
        ("acme/shard-huge-length", ["asked for bytes 0-", "with a 1,000,000,000,000-byte body; refusing"]),
        ("acme/shard-chunked-more", ["the server sent more; refusing a reply longer than the range"]),
    ],
)
def test_a_body_larger_than_asked_for_is_refused(hub, tmp_path, repo, needles):
    start = len(hub.log)
    with pytest.raises(TargetError) as err:
        load_checkpoint(open_repo(hub, repo, tmp_path / "cache"))
    one_line(err, *needles)
    assert sum(hub.lie_bytes.get(r.path, 0) for r in hub.requests(start)) < 64 * 1024  # refused before or at once


# ---- types: the model info is checked before anything uses it -------------------------------------------------------
@pytest.mark.parametrize("repo", sorted(WRONG_TYPES))
def test_a_model_info_of_the_wrong_types_is_refused(hub, tmp_path, repo):
    with pytest.raises(TargetError) as err:
        open_repo(hub, repo, tmp_path / "cache")
    one_line(err, WRONG_TYPES[repo][1])
    assert not (tmp_path / "cache").exists()


def test_a_size_given_as_a_string_is_a_one_line_error_not_a_crash(hub, tmp_path):
    assert_one_line_error(
        run(hub, tmp_path, "doctor", "acme/size-string"), "'855440' as the size", "refusing its answer"
    )


# ---- redirects ------------------------------------------------------------------------------------------------------
def test_redirects_to_another_port_give_the_local_verdict_and_drop_the_token(hub, other, tmp_path):
    start, other_start = len(hub.log), len(other.log)
    for repo in ("acme/info-elsewhere", "acme/shard-elsewhere"):
        result, _ = timed_run(hub, tmp_path, "doctor", repo, "--format", "json", HF_TOKEN="hf_secret")
        assert result.returncode == 0, result.stderr
        assert verdict(json.loads(result.stdout)) == local_verdict(GENUINE / BASE, deep=False)
    hops = other.requests(other_start)
    assert {r.path.split("?")[0] for r in hops} >= {
        "/api/models/acme/plain",
        f"/acme/plain/resolve/{hub.commit('acme/plain')}/{SHARD}",
    }
    assert not any(r.auth for r in hops), "the token went to another origin"
    assert all(r.auth for r in hub.requests(start))
    assert_only_cache_files(tmp_path, hub)


@pytest.mark.parametrize(
    "repo, needle",
    [
        ("acme/info-loop", "redirects more than 10 times (a redirect loop?)"),
        ("acme/info-to-file", "/etc/passwd', which is not http(s)"),
        ("acme/info-to-closed-port", "cannot reach the Hub"),
    ],
)
def test_a_redirect_loop_or_a_redirect_nowhere_is_a_one_line_error(hub, tmp_path, repo, needle):
    result, seconds = timed_run(hub, tmp_path, "doctor", repo)
    assert_one_line_error(result, needle)
    assert seconds < COMMAND + SLACK
    assert cache_names(tmp_path) == set()
