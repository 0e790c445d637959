"""A Hub (or a proxy or mirror in front of it) that misbehaves: a 206 whose Content-Range is not the range asked for,
a body cut short, a body longer than the range, a shard header that declares more bytes than the file has. Each gets
a clear one-line error or the right verdict, a bounded number of attempts, and no more bytes held than were asked
for. Against the loopback fake Hub, with the real huggingface_hub client in a subprocess."""

from __future__ import annotations

import json
import struct

import pytest

from tests.corrupt import GENUINE, copy_fixture
from tests.fake_hub import HubServer, write_settings
from tests.hub_repos import link_repo
from tests.read.test_hub import ckpt, local_verdict, verdict

BASE = "base-llama-bf16"
SHARD = "model.safetensors"
pytestmark = pytest.mark.skipif(not (GENUINE / BASE).exists(), reason="fixtures/genuine is not present")
MANGLED = {  # repo -> (how the shard's range replies misbehave, for how many requests)
    "acme/wrong-range": ("content-range", 1000),
    "acme/cut-once": ("truncate", 1),
    "acme/cut-always": ("truncate", 1000),
    "acme/short-once": ("short", 1),
    "acme/short-always": ("short", 1000),
    "acme/oversize": ("oversize", 1000),
}


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("hostile-hub")
    for repo, rule in MANGLED.items():
        write_settings(link_repo(GENUINE / BASE, root / repo), mangle={SHARD: list(rule)})
    # A header length field larger than the file: the reader's "truncated", from the first read alone.
    liar = copy_fixture(BASE, root / "acme")
    raw = bytearray((liar / SHARD).read_bytes())
    struct.pack_into("<Q", raw, 0, 50_000_000)
    (liar / SHARD).write_bytes(bytes(raw))
    liar.rename(root / "acme" / "header-liar")
    with HubServer(root) as srv:
        yield srv


def shard_requests(hub: HubServer, start: int) -> list:
    return [r for r in hub.requests(start) if r.path.endswith(f"/{SHARD}")]


def test_a_wrong_content_range_is_refused_at_once(hub, tmp_path):
    start = len(hub.log)
    run = ckpt(hub, tmp_path, "doctor", "acme/wrong-range")
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "asked for bytes 0-" in run.stderr and "refusing bytes from the wrong place" in run.stderr
    assert len(shard_requests(hub, start)) == 1  # deterministic: not retried


@pytest.mark.parametrize("repo", ["acme/cut-once", "acme/short-once"])
def test_a_body_cut_short_once_is_retried_and_the_verdict_is_right(hub, tmp_path, repo):
    start = len(hub.log)
    run = ckpt(hub, tmp_path, "doctor", repo, "--format", "json")
    assert run.returncode == 0, run.stderr
    assert verdict(json.loads(run.stdout)) == local_verdict(GENUINE / BASE, deep=False)
    first, retry, *_rest = shard_requests(hub, start)
    assert first.range == retry.range  # the cut reply was asked for again, once


@pytest.mark.parametrize(
    "repo, message",
    [("acme/cut-always", "cannot reach the Hub"), ("acme/short-always", "the connection keeps closing early")],
)
def test_a_body_always_cut_short_is_an_error_after_three_attempts(hub, tmp_path, repo, message):
    start = len(hub.log)
    run = ckpt(hub, tmp_path, "doctor", repo)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "internal error" not in run.stderr, run.stderr
    assert message in run.stderr
    assert len(shard_requests(hub, start)) == 3


def test_a_range_reply_longer_than_asked_for_is_refused_at_once(hub, tmp_path):
    """A 206 with the right Content-Range but 1 MiB more body than the range, declared: an error, not a buffer."""
    start = len(hub.log)
    run = ckpt(hub, tmp_path, "doctor", "acme/oversize", "--format", "json", "--deep")
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "-byte body; refusing bytes from the wrong place" in run.stderr
    assert len(shard_requests(hub, start)) == 1  # deterministic: not retried


def test_a_header_longer_than_the_file_costs_one_small_read(hub, tmp_path):
    start = len(hub.log)
    run = ckpt(hub, tmp_path, "doctor", "acme/header-liar", "--format", "json")
    assert run.returncode == 1, run.stderr
    findings = json.loads(run.stdout)["findings"]
    assert any(f["code"] == "CK104" and "runs past the end" in f["message"] for f in findings), findings
    reads = shard_requests(hub, start)
    assert len(reads) == 1 and reads[0].bytes <= 64 * 1024  # never asked for the 50 MB it declares


def test_a_server_ignoring_ranges_is_not_streamed_far_into_a_file(tmp_path):
    from ckpt_tools.errors import TargetError
    from ckpt_tools.read.hub import SKIP_LIMIT, HubSource
    from ckpt_tools.read.hub_target import HubTarget

    repo = tmp_path / "hub" / "acme" / "big"
    repo.mkdir(parents=True)
    with open(repo / "big.safetensors", "wb") as fh:  # sparse: a hole the size of a shard's weights
        fh.truncate(SKIP_LIMIT + 16 * 1024 * 1024)
    with HubServer(tmp_path / "hub", ignore_range=True) as srv:
        source = HubSource(HubTarget("acme/big", None), endpoint=srv.url, cache_dir=False)
        assert source.read_range("big.safetensors", 1024, 16) == bytes(16)  # near the start: skipped to, fine
        with pytest.raises(TargetError, match="ignores HTTP range requests, so reading byte"):
            source.read_range("big.safetensors", SKIP_LIMIT + 1024, 16)
