"""Hub targets against a real HTTP server: the real huggingface_hub client, in a subprocess whose environment points
it at a fake Hub on 127.0.0.1 (hub-offline.md section 5), serving repos built from the genuine fixtures.

Every verdict is compared with the one for the same files read locally, and every run is costed from the server's
request log: requests, bytes, and which byte ranges were read.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from itertools import pairwise
from pathlib import Path

import pytest

from ckpt_tools.pipeline import analyze
from ckpt_tools.rules.base import all_rules
from tests.corrupt import GENUINE, copy_fixture, genuine_entries, patch_tensor_bytes
from tests.fake_hub import HubServer, Request, write_settings
from tests.hub_repos import header_lengths, link_repo, scale_moe_fixture

ENTRIES = genuine_entries()
pytestmark = pytest.mark.skipif(not ENTRIES, reason="fixtures/genuine is not present")

CONFIGS = ("config.json", "hf_quant_config.json", "model.safetensors.index.json")
SYNTHETIC = "acme/moe-10-shards"
MOE = "llmc-qwen3moe-nvfp4-sharded"
NAN_TENSOR = "model.layers.1.mlp.experts.2.down_proj.weight_scale"
GATED_TOKEN, PRIVATE_TOKEN = "hf_granted_token", "hf_private_token"
PROXY_VARS = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}


# ---- repos and servers --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hub_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hub")


@pytest.fixture(scope="module")
def repos(hub_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Repo id -> the local folder it serves (the same files a local run reads)."""
    root = hub_root
    spare = tmp_path_factory.mktemp("spare")
    out: dict[str, Path] = {}
    for entry in ENTRIES:
        out[f"genuine/{entry}"] = link_repo(GENUINE / entry, root / "genuine" / entry)
    out[SYNTHETIC] = scale_moe_fixture(GENUINE / MOE, root / SYNTHETIC, [1] * 9 + [4], experts=16)

    out["acme/gated"] = link_repo(GENUINE / "modelopt-llama-nvfp4-awq-sharded", root / "acme/gated")
    write_settings(out["acme/gated"], gated="auto", token=GATED_TOKEN)
    out["acme/private"] = link_repo(GENUINE / MOE, root / "acme/private")
    write_settings(out["acme/private"], private=True, token=PRIVATE_TOKEN)

    nan = copy_fixture(MOE, spare)
    patch_tensor_bytes(nan, NAN_TENSOR, {0: 0x7F, 9: 0xFF})
    out["acme/nan-scale"] = nan.rename(root / "acme" / "nan-scale")

    # main is the genuine checkpoint; branch v1 has its single shard truncated by 64 bytes.
    out["acme/branched"] = link_repo(GENUINE / "modelopt-llama-nvfp4", root / "acme/branched")
    v1 = copy_fixture("modelopt-llama-nvfp4", spare / "v1")
    shard = v1 / "model.safetensors"
    shard.write_bytes(shard.read_bytes()[:-64])
    write_settings(out["acme/branched"], branches={"v1": str(v1)})
    out["acme/branched@v1"] = v1

    out["acme/flaky"] = link_repo(GENUINE / "base-llama-bf16", root / "acme/flaky")
    write_settings(out["acme/flaky"], fail={"model.safetensors": [503, 1]})
    out["acme/down"] = link_repo(GENUINE / "base-llama-bf16", root / "acme/down")
    write_settings(out["acme/down"], fail={"config.json": [503, 1000]})

    pointer = root / "acme" / "lfs-pointer"
    pointer.mkdir()
    (pointer / "config.json").symlink_to(GENUINE / "base-llama-bf16" / "config.json")
    (pointer / "model.safetensors").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:" + "ab" * 32 + "\nsize 855440\n"
    )
    out["acme/lfs-pointer"] = pointer

    nested = link_repo(GENUINE / "base-llama-bf16", root / "acme" / "nested")
    (nested / "original").mkdir()
    (nested / "original" / "consolidated.safetensors").write_bytes(b"not a safetensors file at all")
    out["acme/nested"] = nested

    empty = root / "acme" / "no-weights"
    empty.mkdir()
    (empty / "config.json").symlink_to(GENUINE / "base-llama-bf16" / "config.json")
    out["acme/no-weights"] = empty
    return out


@pytest.fixture(scope="module")
def hub(hub_root: Path, repos: dict[str, Path]):
    with HubServer(hub_root) as srv:
        yield srv


@pytest.fixture(scope="module")
def cdn_hub(hub_root: Path, repos: dict[str, Path]):
    """LFS files answer 302 to `localhost`: another origin, like the real CDN."""
    with HubServer(hub_root, lfs_redirect=True) as srv:
        yield srv


@pytest.fixture(scope="module")
def rangeless_hub(hub_root: Path, repos: dict[str, Path]):
    """A server that ignores Range and always sends whole files."""
    with HubServer(hub_root, ignore_range=True) as srv:
        yield srv


# ---- running the client -------------------------------------------------------------------------------------------
def hub_env(srv: HubServer | str, home: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HF_", "HUGGING_FACE_")) and k.lower() not in PROXY_VARS and k != "TRANSFORMERS_OFFLINE"
    }
    env.update(
        HF_ENDPOINT=srv if isinstance(srv, str) else srv.url,
        HF_HOME=str(home),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HUB_ETAG_TIMEOUT="5",
        HF_HUB_DOWNLOAD_TIMEOUT="5",
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
        CKPT_NO_PROGRESS="1",
        NO_COLOR="1",
    )
    env.update(extra)
    return env


def ckpt(
    srv: HubServer | str, home: Path, *args: str, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    """The `ckpt` CLI in a subprocess, run from an empty folder so that no `org/name` exists locally; past `timeout`
    seconds it is killed and the test fails."""
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


DRIVER = r"""
import json, sys, urllib.request
from ckpt_tools.pipeline import analyze
from ckpt_tools.read import open_source
url, jobs = sys.argv[1], json.loads(sys.argv[2])
for job in jobs:
    urllib.request.urlopen(f"{url}/__mark/{job['id']}").read()
    result = analyze(job["target"], deep=job["deep"])
    print(json.dumps({"id": job["id"], "report": result.report.to_dict(), "remote": result.checkpoint.remote}))
"""


def drive(srv: HubServer, home: Path, jobs: list[dict], **env: str) -> dict[str, tuple[dict, list[Request]]]:
    """Run many analyses in one subprocess; returns job id -> (report, the requests that job made)."""
    start = len(srv.log)
    cwd = home / "cwd"
    cwd.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, srv.url, json.dumps(jobs)],
        cwd=cwd,
        env=hub_env(srv, home, **env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    reports = {r["id"]: r for r in map(json.loads, proc.stdout.splitlines())}
    log = srv.log[start:]
    marks = [i for i, r in enumerate(log) if r.path.startswith("/__mark/")] + [len(log)]
    out = {}
    for i, j in pairwise(marks):
        job_id = log[i].path.removeprefix("/__mark/")
        out[job_id] = (reports[job_id]["report"], log[i + 1 : j])
        assert reports[job_id]["remote"] is True
    return out


# ---- comparing with the local verdict -----------------------------------------------------------------------------
def verdict(report: dict) -> dict:
    """A report without what names the target (the target, the Hub provenance, and fix commands: a Hub finding has
    none, since only a local copy can be repaired)."""
    d = {k: v for k, v in report.items() if k not in ("target", "hub", "tool")}
    d["findings"] = [{**f, "fix": None} for f in d["findings"]]
    d["skipped_rules"] = sorted(s["code"] for s in d.get("skipped_rules", ()))
    return d


def local_verdict(folder: Path, *, deep: bool) -> dict:
    """Remote without --deep runs the same rules as local --headers-only; remote --deep the same as local."""
    return verdict(analyze(str(folder), headers_only=not deep).report.to_dict())


def local_exit(folder: Path) -> int:
    return analyze(str(folder), headers_only=True).report.exit_code()


def resolved(requests: list[Request]) -> list[Request]:
    return [r for r in requests if "/resolve/" in r.path or r.path.startswith("/__cdn/")]


def file_of(r: Request) -> str:
    return r.path.split("?")[0].rsplit("/", 1)[-1]


def range_of(r: Request) -> tuple[int, int]:
    a, b = r.range.removeprefix("bytes=").split("-")
    return int(a), int(b)


def check_cold_cost(folder: Path, requests: list[Request], commit: str) -> None:
    """At most shards + 4 requests, all pinned to the commit; header bytes read at about 1.2x their size; no read
    beyond a shard's header plus the estimate's margin."""
    headers = header_lengths(folder)
    configs = {n: (folder / n).stat().st_size for n in CONFIGS if (folder / n).exists()}
    assert len(requests) <= len(headers) + 4, [r.path for r in requests]
    assert requests[0].path.startswith("/api/models/") and "blobs=true" in requests[0].path
    reads = requests[1:]
    assert all(r.method == "GET" and f"/resolve/{commit}/" in r.path for r in reads), reads
    assert all(r.status == 206 for r in reads)
    per_file: dict[str, int] = {}
    for r in reads:
        per_file[file_of(r)] = per_file.get(file_of(r), 0) + r.bytes
    assert {n: per_file.get(n) for n in configs} == configs  # each config read once, whole
    shard_bytes = {n: per_file.get(n, 0) for n in headers}
    for name, need in headers.items():  # every header read whole, and nothing much past it
        assert need <= shard_bytes[name] <= max(need * 1.35, need + 512), (name, need, shard_bytes[name])
    assert sum(shard_bytes.values()) <= 1.2 * sum(headers.values()) + 512 * len(headers)
    assert set(per_file) <= set(headers) | set(configs)


# ---- tests --------------------------------------------------------------------------------------------------------
def test_every_genuine_fixture_same_verdict_as_local_within_budget(hub, repos, tmp_path):
    jobs = [
        {"id": f"{e}:{mode}", "target": f"genuine/{e}", "deep": mode == "deep"}
        for e in ENTRIES
        for mode in ("cold", "deep")
    ]
    runs = drive(hub, tmp_path, jobs)
    for entry in ENTRIES:
        folder = repos[f"genuine/{entry}"]
        report, requests = runs[f"{entry}:cold"]
        assert verdict(report) == local_verdict(folder, deep=False), entry
        assert report["target"] == f"genuine/{entry}"
        assert report["hub"]["commit"] == hub.commit(f"genuine/{entry}")
        check_cold_cost(folder, requests, report["hub"]["commit"])

        report, requests = runs[f"{entry}:deep"]
        assert verdict(report) == local_verdict(folder, deep=True), entry
        # Headers and configs come from the cache; only the resolution and the scale tensors' ranges are fetched,
        # and those lie in the data region of each shard.
        assert requests[0].path.startswith("/api/models/")
        headers = header_lengths(folder)
        for r in requests[1:]:
            assert range_of(r)[0] >= headers[file_of(r)], (entry, r)


def test_sharded_repo_with_a_header_over_100kb(hub, repos, tmp_path):
    folder = repos[SYNTHETIC]
    headers = header_lengths(folder)
    assert len(headers) == 10 and max(headers.values()) > 100_000
    runs = drive(
        hub,
        tmp_path,
        [
            {"id": "cold", "target": SYNTHETIC, "deep": False},
            {"id": "cached", "target": SYNTHETIC, "deep": False},
            {"id": "deep", "target": f"hf://{SYNTHETIC}", "deep": True},
        ],
    )
    cold, requests = runs["cold"]
    assert verdict(cold) == local_verdict(folder, deep=False)
    assert cold["checkpoint"]["shards"] == 10 and cold["checkpoint"]["tensors"] > 2000
    check_cold_cost(folder, requests, cold["hub"]["commit"])
    assert len(requests) == 13  # model info, index, config, one per shard: the big header too

    cached, requests = runs["cached"]
    assert cached == cold
    assert len(requests) == 1 and requests[0].path.startswith("/api/models/")

    deep, requests = runs["deep"]
    assert verdict(deep) == local_verdict(folder, deep=True)
    # Scale tensors are read in coalesced spans, not one request per tensor.
    scales = sum(
        1
        for n in json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
        if n.endswith("weight_scale")
    )
    assert 10 <= len(requests) - 1 < scales / 10


def test_repeat_run_costs_one_request(hub, repos, tmp_path):
    first = ckpt(hub, tmp_path, "doctor", "genuine/" + MOE, "--format", "json")
    start = len(hub.log)
    second = ckpt(hub, tmp_path, "doctor", "genuine/" + MOE, "--format", "json")
    assert second.returncode == first.returncode == 0
    assert json.loads(second.stdout) == json.loads(first.stdout)
    assert [r.path.split("?")[0] for r in hub.requests(start)] == [f"/api/models/genuine/{MOE}"]
    cache = list((tmp_path / "assets" / "ckpt-tools").rglob("*.ranges"))
    assert [p.stem for p in cache] == [hub.commit("genuine/" + MOE)]


def test_damaged_cache_costs_requests_not_wrong_bytes(hub, repos, tmp_path):
    ckpt(hub, tmp_path, "doctor", SYNTHETIC)
    (cache,) = (tmp_path / "assets" / "ckpt-tools").rglob("*.ranges")
    raw = bytearray(cache.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # flips a byte inside some record: that record and all after it are dropped
    cache.write_bytes(bytes(raw))
    start = len(hub.log)
    run = ckpt(hub, tmp_path, "doctor", SYNTHETIC, "--format", "json")
    assert run.returncode == 0, run.stderr
    assert verdict(json.loads(run.stdout)) == local_verdict(repos[SYNTHETIC], deep=False)
    assert 1 < len(hub.requests(start)) <= 14
    start = len(hub.log)  # the damaged tail was cut off and refilled: the next run is fully cached again
    assert ckpt(hub, tmp_path, "doctor", SYNTHETIC).returncode == 0
    assert len(hub.requests(start)) == 1


def test_cdn_redirect_keeps_budget_and_drops_the_token(cdn_hub, repos, tmp_path):
    jobs = [
        {"id": "synthetic", "target": SYNTHETIC, "deep": False},
        {"id": "private", "target": "acme/private", "deep": True},
    ]
    runs = drive(cdn_hub, tmp_path, jobs, HF_TOKEN=PRIVATE_TOKEN)
    for job_id, repo, deep in (("synthetic", SYNTHETIC, False), ("private", "acme/private", True)):
        report, requests = runs[job_id]
        assert verdict(report) == local_verdict(repos[repo], deep=deep)
        shards = len(header_lengths(repos[repo]))
        hub_side = [r for r in requests if r.host.startswith("127.0.0.1")]
        cdn_side = [r for r in requests if r.host.startswith("localhost")]
        assert all(r.path.startswith("/__cdn/") for r in cdn_side)
        assert len(hub_side) <= shards + 4 + (len(cdn_side) - shards if deep else 0)
        assert sum(r.status == 302 for r in hub_side) == len(cdn_side)
        assert all(r.auth for r in hub_side) and not any(r.auth for r in cdn_side)
        if not deep:
            assert len(cdn_side) == shards


def test_server_without_range_support_gives_the_same_verdict(rangeless_hub, repos, tmp_path):
    runs = drive(rangeless_hub, tmp_path, [{"id": "deep", "target": "acme/nan-scale", "deep": True}])
    report, requests = runs["deep"]
    assert verdict(report) == local_verdict(repos["acme/nan-scale"], deep=True)
    assert [f["code"] for f in report["findings"]] == ["CK501"]
    assert all(r.status == 200 for r in resolved(requests))


def test_deep_reads_scale_values_and_plain_run_says_it_skipped_them(hub, repos, tmp_path):
    plain = ckpt(hub, tmp_path, "doctor", "acme/nan-scale")
    assert plain.returncode == 0, plain.stderr
    [skipped] = [line for line in plain.stdout.splitlines() if line.startswith("skipped ")]
    assert "CK501 nan-fp8-scale" in skipped
    assert skipped.endswith(": remote target: scale values are read only with --deep")
    assert "CK501" not in plain.stdout.replace(skipped, "")
    data = json.loads(ckpt(hub, tmp_path, "doctor", "acme/nan-scale", "--format", "json").stdout)
    value_rules = [r.code for r in all_rules() if r.needs_values]  # CK501 and the catalogue's value rules
    assert "CK501" in value_rules
    assert [s["code"] for s in data["skipped_rules"]] == value_rules

    deep = ckpt(hub, tmp_path, "doctor", "acme/nan-scale", "--deep", "--format", "json")
    assert deep.returncode == 1
    report = json.loads(deep.stdout)
    assert "skipped_rules" not in report
    assert verdict(report) == local_verdict(repos["acme/nan-scale"], deep=True)
    assert report["findings"][0]["tensors"] == [NAN_TENSOR]
    assert report["findings"][0]["fix"] is None  # a Hub repo is repaired as a local copy, never in place

    both = ckpt(hub, tmp_path, "doctor", "acme/nan-scale", "--deep", "--headers-only")
    assert both.returncode == 2 and "choose one" in both.stderr


def test_text_report_names_the_commit(hub, repos, tmp_path):
    run = ckpt(hub, tmp_path, "doctor", "acme/branched@v1")
    assert run.returncode == 1
    lines = run.stdout.splitlines()
    assert lines[0] == "ckpt doctor acme/branched@v1"
    commit = hub.commit("acme/branched", "v1")
    assert f"  hub           acme/branched @ v1 = commit {commit} ({hub.url})" in lines


def test_revisions(hub, repos, tmp_path):
    main = json.loads(ckpt(hub, tmp_path, "doctor", "acme/branched", "--format", "json").stdout)
    assert [f["code"] for f in main["findings"]] == [] and main["hub"]["revision"] is None
    v1_local = local_verdict(repos["acme/branched@v1"], deep=False)
    assert any(f["slug"] == "invalid-header" for f in v1_local["findings"])
    sha = hub.commit("acme/branched", "v1")
    for args in (
        ["acme/branched", "--revision", "v1"],
        ["acme/branched@v1"],
        [f"hf://acme/branched@{sha}"],
        ["acme/branched@v1", "--revision", "v1"],
    ):
        run = ckpt(hub, tmp_path, "doctor", *args, "--format", "json")
        assert run.returncode == 1, (args, run.stderr)
        report = json.loads(run.stdout)
        assert verdict(report) == v1_local
        assert report["hub"]["commit"] == sha

    missing = ckpt(hub, tmp_path, "doctor", "acme/branched@nope")
    assert missing.returncode == 2
    assert missing.stderr == (
        f"ckpt: acme/branched: revision 'nope' not found; give a branch, tag or commit sha of {hub.url}/acme/branched\n"
    )
    clash = ckpt(hub, tmp_path, "doctor", "acme/branched@v1", "--revision", "main")
    assert clash.returncode == 2 and "conflicts with --revision 'main'" in clash.stderr


def test_gated_repo(hub, repos, tmp_path):
    anonymous = ckpt(hub, tmp_path, "doctor", "acme/gated")
    assert anonymous.returncode == 2
    assert anonymous.stderr == (
        f"ckpt: acme/gated: gated repo; request access at {hub.url}/acme/gated, then log in "
        "with `hf auth login` or set HF_TOKEN\n"
    )
    refused = ckpt(hub, tmp_path, "doctor", "acme/gated", HF_TOKEN="hf_someone_else")
    assert refused.returncode == 2
    assert "your token has not been granted access; request access at " + f"{hub.url}/acme/gated" in refused.stderr
    granted = ckpt(hub, tmp_path, "doctor", "acme/gated", "--format", "json", HF_TOKEN=GATED_TOKEN)
    assert granted.returncode == local_exit(repos["acme/gated"]) == 1, granted.stderr  # NVFP4_AWQ: upstream rejects it
    assert verdict(json.loads(granted.stdout)) == local_verdict(repos["acme/gated"], deep=False)


def test_private_repo_with_token_or_stored_login(hub, repos, tmp_path):
    anonymous = ckpt(hub, tmp_path / "a", "doctor", "acme/private")
    assert anonymous.returncode == 2
    assert anonymous.stderr == (
        f"ckpt: acme/private: repository not found on {hub.url}; if it is private, log in with `hf auth login` or "
        "set HF_TOKEN; treated as Hub repo id acme/private (no local folder acme/); use ./acme/private for a local "
        "path\n"
    )
    wrong = ckpt(hub, tmp_path / "b", "doctor", "hf://acme/private", HF_TOKEN="hf_wrong")
    assert wrong.returncode == 2
    assert (
        wrong.stderr == f"ckpt: acme/private: repository not found on {hub.url}, or it is private and your token "
        "cannot see it\n"
    )
    expected = local_verdict(repos["acme/private"], deep=False)
    by_env = ckpt(hub, tmp_path / "c", "doctor", "acme/private", "--format", "json", HF_TOKEN=PRIVATE_TOKEN)
    assert by_env.returncode == 0, by_env.stderr
    assert verdict(json.loads(by_env.stdout)) == expected
    login = tmp_path / "d"
    login.mkdir()
    (login / "token").write_text(PRIVATE_TOKEN)  # where `hf auth login` stores it (HF_HOME/token)
    by_login = ckpt(hub, login, "doctor", "acme/private", "--format", "json")
    assert by_login.returncode == 0, by_login.stderr
    assert verdict(json.loads(by_login.stdout)) == expected


def test_offline_and_unreachable_hub(hub, tmp_path):
    start = len(hub.log)
    offline = ckpt(hub, tmp_path, "doctor", SYNTHETIC, HF_HUB_OFFLINE="1")
    assert offline.returncode == 2
    assert offline.stderr == (
        f"ckpt: {SYNTHETIC}: huggingface_hub is in offline mode (HF_HUB_OFFLINE is set); unset "
        f"it to inspect a Hub repo, or inspect a local copy; treated as Hub repo id {SYNTHETIC} (no local folder "
        f"acme/); use ./{SYNTHETIC} for a local path\n"
    )
    assert hub.requests(start) == []

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    down = ckpt(dead, tmp_path, "inspect", SYNTHETIC)
    assert down.returncode == 2
    assert down.stderr.startswith(f"ckpt: {SYNTHETIC}: cannot reach the Hub at {dead} (ConnectError")
    assert down.stderr.endswith(
        f"check the network, HF_ENDPOINT and proxy settings; treated as Hub repo id {SYNTHETIC} (no local folder "
        f"acme/); use ./{SYNTHETIC} for a local path\n"
    )
    assert down.stderr.count("\n") == 1


def test_persistent_503_and_a_server_that_is_not_a_hub(hub, tmp_path):
    start = len(hub.log)
    down = ckpt(hub, tmp_path, "doctor", "acme/down")
    assert down.returncode == 2
    assert down.stderr == (
        f"ckpt: acme/down: the Hub answered HTTP 503 (try again) at {hub.url}; treated as Hub repo id acme/down (no "
        "local folder acme/); use ./acme/down for a local path\n"
    )
    assert [r.status for r in hub.requests(start)] == [200, 503, 503, 503]  # model info, then three attempts

    class NotAHub(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html>a web page</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), NotAHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        run = ckpt(url, tmp_path, "doctor", "acme/anything")
    finally:
        server.shutdown()
        server.server_close()
    assert run.returncode == 2
    assert run.stderr.startswith(f"ckpt: acme/anything: {url} did not answer like a Hugging Face Hub (")
    assert run.stderr.endswith("); check HF_ENDPOINT\n")


def test_transient_503_is_retried(hub, repos, tmp_path):
    start = len(hub.log)
    run = ckpt(hub, tmp_path, "doctor", "acme/flaky", "--format", "json")
    assert run.returncode == 0, run.stderr
    assert verdict(json.loads(run.stdout)) == local_verdict(repos["acme/flaky"], deep=False)
    statuses = [r.status for r in hub.requests(start) if r.path.endswith("/model.safetensors")]
    assert statuses[:2] == [503, 206]


def test_other_files_and_targets(hub, repos, tmp_path):
    pointer = ckpt(hub, tmp_path, "doctor", "acme/lfs-pointer", "--format", "json")
    assert pointer.returncode == 1
    assert verdict(json.loads(pointer.stdout)) == local_verdict(repos["acme/lfs-pointer"], deep=False)
    assert json.loads(pointer.stdout)["findings"][0]["slug"] == "lfs-pointer"

    nested = ckpt(hub, tmp_path, "doctor", "acme/nested", "--format", "json")  # subfolders are not the checkpoint
    assert verdict(json.loads(nested.stdout)) == local_verdict(repos["acme/nested"], deep=False)

    empty = ckpt(hub, tmp_path, "doctor", "acme/no-weights")
    assert (empty.returncode, empty.stderr) == (2, "ckpt: acme/no-weights: no .safetensors file found\n")
    for target, message in (
        ("hf://datasets/acme/data", "only model repos can be inspected"),
        ("hf://acme/a..b", "not a valid Hub repo id"),
        ("hf://acme", "not a Hub model repo"),
    ):
        run = ckpt(hub, tmp_path, "doctor", target)
        assert run.returncode == 2 and message in run.stderr and run.stderr.count("\n") == 1, (target, run.stderr)


def test_local_path_always_wins(hub, repos, tmp_path):
    cwd = tmp_path / "cwd"
    shadow = cwd / "acme" / "gated"  # a local folder named like a Hub repo
    shadow.parent.mkdir(parents=True)
    copy_fixture("base-llama-bf16", shadow.parent).rename(shadow)
    start = len(hub.log)
    run = ckpt(hub, tmp_path, "doctor", "acme/gated", "--format", "json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["target"] == "acme/gated" and "hub" not in report
    assert verdict(report) == local_verdict(shadow, deep=True)
    dotted = ckpt(hub, tmp_path, "doctor", "./acme/private")
    assert (dotted.returncode, dotted.stderr) == (2, "ckpt: no such folder: ./acme/private\n")
    revision = ckpt(hub, tmp_path, "doctor", "acme/gated", "--revision", "v1")
    assert revision.returncode == 2 and "--revision applies to Hub repos only" in revision.stderr
    assert hub.requests(start) == []


def test_inspect_matches_local(hub, repos, tmp_path):
    remote = ckpt(
        hub, tmp_path, "inspect", SYNTHETIC, "--format", "json", "--tensors", "*.layers.9.*down_proj.weight_scale"
    )
    assert remote.returncode == 0, remote.stderr
    local = subprocess.run(
        [
            sys.executable,
            "-m",
            "ckpt_tools.cli.main",
            "inspect",
            str(repos[SYNTHETIC]),
            "--format",
            "json",
            "--tensors",
            "*.layers.9.*down_proj.weight_scale",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "CKPT_NO_PROGRESS": "1"},
    )
    remote_data, local_data = json.loads(remote.stdout), json.loads(local.stdout)
    assert remote_data.pop("hub")["repo_id"] == SYNTHETIC
    assert remote_data.pop("target") == SYNTHETIC
    local_data.pop("target")
    assert remote_data == local_data and len(remote_data["tensors"]) == 16
    text = ckpt(hub, tmp_path, "inspect", f"{SYNTHETIC}@main")
    assert text.stdout.startswith(f"ckpt inspect {SYNTHETIC}@main\n")
    assert f"  hub           {SYNTHETIC} @ main = commit {hub.commit(SYNTHETIC)}" in text.stdout


def test_open_source_gives_a_remote_hub_source(hub, tmp_path):
    code = (
        "from ckpt_tools.read import open_source; s = open_source('hf://acme/flaky@main'); "
        "print(type(s).__name__, s.is_remote, s.label, s.sha, ' '.join(s.list_files()))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=hub_env(hub, tmp_path), capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.stdout.split() == [
        "HubSource",
        "True",
        "acme/flaky@main",
        hub.commit("acme/flaky"),
        "config.json",
        "generation_config.json",
        "model.safetensors",
    ]


STATS_DRIVER = r"""
import json, sys
from ckpt_tools.pipeline import analyze
values = analyze(sys.argv[1], deep=True).checkpoint.values
print(json.dumps({name: repr(stats) for name, stats in values.items()}))
"""


def test_deep_scan_measures_the_same_statistics_as_a_local_scan(hub, repos, tmp_path):
    """--deep streams the scale ranges through the same value scan (ranged reads): identical statistics."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", STATS_DRIVER, "acme/nan-scale"],
        cwd=cwd,
        env=hub_env(hub, tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    local = analyze(str(repos["acme/nan-scale"])).checkpoint.values
    remote = json.loads(proc.stdout)
    assert remote == {name: repr(stats) for name, stats in local.items()}
    assert local.get(NAN_TENSOR).nan == 2


def test_many_hub_targets_are_judged_concurrently_in_the_order_given(hub_root, repos, tmp_path):
    """`ckpt doctor A B C` with Hub repos reads them at once (each round trip is 0.3 s here), yet reports in the order
    given, each verdict the one the same files get locally; a local target between them is judged in its place."""
    targets = ["genuine/" + MOE, "acme/nan-scale", "genuine/modelopt-llama-nvfp4"]
    local = str(GENUINE / "base-llama-bf16")
    with HubServer(hub_root, delay=0.3) as slow:
        run = ckpt(slow, tmp_path, "doctor", targets[0], local, *targets[1:], "--format", "json")
        log = slow.requests()
    assert run.returncode == 0, run.stderr  # nan-scale is found only by a --deep value scan: headers are clean
    reports = json.loads(run.stdout)
    assert [r["target"] for r in reports] == [targets[0], local, *targets[1:]]
    for report, target in zip(reports, [targets[0], local, *targets[1:]], strict=True):
        folder = Path(target) if target == local else repos[target]
        assert verdict(report) == local_verdict(folder, deep=target == local), target
    # Every repo's first request (its model info) reached the server before any shard was read: they ran at once.
    first = [r.path for r in log[: len(targets)]]
    assert all(p.startswith("/api/models/") for p in first), first
    assert {p.split("/api/models/")[1].split("/revision")[0].split("?")[0] for p in first} == set(targets)
