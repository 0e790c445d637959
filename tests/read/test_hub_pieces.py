"""The pieces of Hub reading that need no server: telling repo ids from paths, the header-size estimate, and the
per-commit range cache."""

from __future__ import annotations

import json
import struct
import threading
from pathlib import Path

import pytest

from ckpt_tools.errors import TargetError, UsageError
from ckpt_tools.model.tensors import Index
from ckpt_tools.read.header_estimate import PROBE, estimate_header_read, first_read_sizes
from ckpt_tools.read.hub_target import HubTarget, parse_hub_target
from ckpt_tools.read.range_cache import RangeCache
from ckpt_tools.write.header import build_file
from tests.corrupt import GENUINE


# ---- targets ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("target", "revision", "expected"),
    [
        ("org/name", None, HubTarget("org/name", None)),
        ("org/name@v1.0", None, HubTarget("org/name", "v1.0")),
        ("org/name@refs/pr/1", None, HubTarget("org/name", "refs/pr/1")),
        ("hf://org/name", "dev", HubTarget("org/name", "dev")),
        ("hf://Org-1/Name_2.5@main", "main", HubTarget("Org-1/Name_2.5", "main")),
        ("./org/name", None, None),
        ("/abs/org/name", None, None),
        ("~/org/name", None, None),
        ("model.safetensors", None, None),
        ("a/b/c", None, None),
        ("org/", None, None),
        ("org/name@", None, None),
    ],
)
def test_parse_hub_target(target, revision, expected, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert parse_hub_target(target, revision) == expected


def test_existing_local_path_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org" / "name").mkdir(parents=True)
    assert parse_hub_target("org/name") is None
    (tmp_path / "org" / "file@v1").write_text("x")
    assert parse_hub_target("org/file@v1") is None
    assert parse_hub_target("hf://org/name") == HubTarget("org/name", None)  # the scheme says Hub


@pytest.mark.parametrize(
    ("target", "error", "message"),
    [
        ("hf://datasets/org/name", TargetError, "only model repos"),
        ("hf://org", TargetError, "not a Hub model repo"),
        ("hf://org/name/sub/file", TargetError, "not a Hub model repo"),
        ("hf://org/name@", TargetError, "not a Hub model repo"),
    ],
)
def test_malformed_hub_targets(target, error, message):
    with pytest.raises(error, match=message):
        parse_hub_target(target)


def test_revision_twice():
    assert parse_hub_target("org/name@v1", "v1") == HubTarget("org/name", "v1")
    with pytest.raises(UsageError, match="conflicts with --revision 'v2'"):
        parse_hub_target("org/name@v1", "v2")
    assert HubTarget("org/name", "v1").label == "org/name@v1" and HubTarget("org/name", None).label == "org/name"


# ---- header estimate ----------------------------------------------------------------------------------------------
def _indexed_shards() -> list[tuple[Path, list[str]]]:
    out = []
    for index in sorted(GENUINE.glob("*/model.safetensors.index.json")):
        weight_map = json.loads(index.read_text())["weight_map"]
        for shard in sorted(set(weight_map.values())):
            out.append((index.parent / shard, [t for t, s in weight_map.items() if s == shard]))
    return out


@pytest.mark.skipif(not _indexed_shards(), reason="fixtures/genuine is not present")
def test_estimate_covers_every_genuine_header_closely():
    total_need = total_estimate = 0
    for path, names in _indexed_shards():
        need = 8 + struct.unpack("<Q", path.read_bytes()[:8])[0]
        estimate = estimate_header_read(names, path.stat().st_size)
        assert need <= estimate <= need + 256 + need // 3, (path, need, estimate)
        total_need += need
        total_estimate += estimate
    assert total_estimate <= 1.25 * total_need


@pytest.mark.parametrize("dtype,shape,size", [("F8_E4M3", [1, 2, 3], 6), ("F32", [], 4), ("BF16", [7, 5, 3], 210)])
def test_estimate_bounds_awkward_names_and_shapes(dtype, shape, size):
    names = [f"model.layers.{i}.mlp.experts.{i * 7}.w\u00e9ight_\"quoted\"" for i in range(50)]
    blob = build_file([(n, dtype, shape, b"\0" * size) for n in names])
    need = 8 + struct.unpack_from("<Q", blob)[0]
    assert need <= estimate_header_read(names, len(blob))


def test_first_read_sizes():
    index = Index("model.safetensors.index.json", {"a.w": "s1.safetensors", "b.w": "s1.safetensors"})
    sizes = {"s1.safetensors": 10**9, "stray.safetensors": 10**9, "tiny.safetensors": 130}
    first = first_read_sizes(index, list(sizes), sizes)
    assert first["s1.safetensors"] == estimate_header_read(["a.w", "b.w"], 10**9)
    assert first["stray.safetensors"] == PROBE  # not in the index: probe, then exactly the rest
    assert first["tiny.safetensors"] == 130  # never past the end; a Git LFS pointer comes whole
    assert first_read_sizes(None, ["s1.safetensors"], sizes) == {"s1.safetensors": PROBE}


# ---- range cache --------------------------------------------------------------------------------------------------
def test_range_cache_round_trip_and_containment(tmp_path):
    cache = RangeCache(tmp_path / "c", "abc.ranges")
    cache.put("model.safetensors", 100, b"0123456789")
    cache.put("dir/\u00fcnicode.json", 0, b"{}")
    again = RangeCache(tmp_path / "c", "abc.ranges")
    assert again.get("model.safetensors", 100, 10) == b"0123456789"
    assert again.get("model.safetensors", 103, 4) == b"3456"
    assert again.get("model.safetensors", 99, 4) is None  # not wholly inside a cached range
    assert again.get("model.safetensors", 105, 6) is None
    assert again.get("other", 100, 1) is None
    assert again.get("dir/\u00fcnicode.json", 0, 2) == b"{}"


def test_range_cache_drops_torn_tail_and_heals(tmp_path):
    path = tmp_path / "abc.ranges"
    cache = RangeCache(tmp_path, path.name)
    cache.put("a", 0, b"x" * 100)
    cache.put("b", 0, b"y" * 100)
    good = path.stat().st_size
    path.write_bytes(path.read_bytes()[: good - 5])  # a crash in the middle of the second record
    torn = RangeCache(tmp_path, path.name)
    assert torn.get("a", 0, 100) == b"x" * 100 and torn.get("b", 0, 1) is None
    torn.put("b", 0, b"z" * 100)
    healed = RangeCache(tmp_path, path.name)
    assert healed.get("b", 0, 100) == b"z" * 100


def test_range_cache_rejects_a_flipped_byte(tmp_path):
    path = tmp_path / "abc.ranges"
    RangeCache(tmp_path, path.name).put("a", 0, b"payload!")
    raw = bytearray(path.read_bytes())
    raw[raw.index(b"payload!")] ^= 1
    path.write_bytes(bytes(raw))
    assert RangeCache(tmp_path, path.name).get("a", 0, 8) is None


def test_range_cache_concurrent_appends(tmp_path):
    cache = RangeCache(tmp_path, "abc.ranges")

    def writer(k: int) -> None:
        for i in range(50):
            cache.put(f"f{k}", i * 1000, bytes([k]) * 1000)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reread = RangeCache(tmp_path, "abc.ranges")
    assert all(reread.get(f"f{k}", i * 1000, 1000) == bytes([k]) * 1000 for k in range(8) for i in range(50))


def test_range_cache_without_a_writable_folder(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cache = RangeCache(blocker, "abc.ranges")
    cache.put("a", 0, b"kept in memory")
    assert cache.get("a", 0, 4) == b"kept" and cache.path is None
    assert RangeCache(None).get("a", 0, 1) is None


@pytest.mark.parametrize("name", ["", ".", "..", "../x.ranges", "/abs/x.ranges", "a/b.ranges", "x\0.ranges"])
def test_range_cache_file_is_a_plain_name(tmp_path, name):
    with pytest.raises(ValueError, match="plain file name"):
        RangeCache(tmp_path, name)


def test_range_cache_never_follows_a_link_at_its_name(tmp_path):
    """A link planted at the cache file's name: nothing is read through it, truncated or appended to."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"not a cache record")
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "abc.ranges").symlink_to(victim)
    cache = RangeCache(tmp_path / "cache", "abc.ranges")
    cache.put("a", 0, b"kept in memory")
    assert cache.get("a", 0, 4) == b"kept" and cache.path is None
    assert victim.read_bytes() == b"not a cache record"


@pytest.mark.parametrize(
    "sha",
    ["/tmp/victim", "../" * 8 + "x", "0" * 39, "0" * 41, "A" * 40, "g" * 40, "0" * 40 + "\n", 40, None, ["0" * 40]],
)
def test_a_commit_sha_must_be_40_lowercase_hex_digits(sha):
    from ckpt_tools.read.hub_info import checked_commit

    with pytest.raises(TargetError, match="not 40 hex digits") as err:
        checked_commit(sha, "acme/x", "http://127.0.0.1:1")
    assert "\n" not in str(err.value)
    assert (
        checked_commit("0123456789abcdef0123456789abcdef01234567", "acme/x", "")
        == "0123456789abcdef0123456789abcdef01234567"
    )


# ---- model info -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    [
        "model.safetensors",
        ".gitattributes",
        "original/consolidated.safetensors",
        "model-00001-of-00002.safetensors",
        "with space (1).json",
        "\u65e5\u672c\u8a9e.md",
        "a..b.json",
    ],
)
def test_names_a_git_tree_can_hold_are_accepted(name):
    from ckpt_tools.read.hub_info import name_problem

    assert name_problem(name) is None


def test_model_info_keeps_root_files_and_prefers_the_lfs_size():
    from ckpt_tools.read.hub_info import parse_model_info

    raw = json.dumps(
        {
            "sha": "ab" * 20,
            "siblings": [
                {"rfilename": "config.json", "size": 12},
                {"rfilename": "model.safetensors", "size": 134, "lfs": {"size": 855440, "sha256": "x"}},
                {"rfilename": "original/consolidated.safetensors", "size": 7},
            ],
        }
    ).encode()
    listing = parse_model_info(raw, "acme/x", "acme/x", None, "http://127.0.0.1:1")
    assert listing.sha == "ab" * 20
    assert dict(listing.sizes) == {"config.json": 12, "model.safetensors": 855440}


@pytest.mark.parametrize("raw", [b"[]", b"not json", b"null", b"[" * 100_000])
def test_a_model_info_that_is_not_a_json_object_names_the_endpoint(raw):
    from ckpt_tools.read.hub_info import parse_model_info

    with pytest.raises(TargetError, match="did not answer like a Hugging Face Hub"):
        parse_model_info(raw, "acme/x", "acme/x", None, "http://127.0.0.1:1")
