"""Compiling a plan reuses what the analysis read when the bytes on disk prove it is the same (`repair.steps`): a shard
header that is exactly the safetensors encoding of the analysis's view is not parsed again, nor an index that is
exactly the analysis's index in the file's own layout; and the index step hands the after-state the map it wrote
(`IndexStep.parsed`), so the prediction parses no index. Each shortcut is held here to the slow path it replaces."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from types import MappingProxyType

import orjson
import pytest

from ckpt_tools.read.loader import load_checkpoint
from ckpt_tools.read.local import LocalSource
from ckpt_tools.repair import steps
from ckpt_tools.repair.journal import decode_journal, encode_journal
from ckpt_tools.repair.plan import Plan
from ckpt_tools.write.header import build_file
from tests.corrupt import genuine_entries
from tests.repair_helpers import fixture_path

INDEX = "model.safetensors.index.json"
SHARD = "model-00001-of-00001.safetensors"


@pytest.mark.parametrize("name", genuine_entries())
def test_shard_view_without_a_parse_is_the_readers(name):
    folder = fixture_path(name)
    ckpt = load_checkpoint(LocalSource(folder))
    for shard in ckpt.shards:
        prefix = steps.read_prefix(folder / shard.name, shard)
        assert steps._encodes_as(*steps._reader_view(shard, prefix), prefix[8:])  # producers' headers: the shortcut
        assert steps._reader_view(shard, prefix) == steps._parsed_view(shard, prefix)


def test_a_header_not_written_as_safetensors_writes_it_is_parsed(tmp_path):
    compact = build_file([("b.w", "BF16", [1], b"\x00\x00"), ("a.w", "F32", [1], b"\x00" * 4)])
    (n,) = struct.unpack("<Q", compact[:8])
    spaced = json.dumps(json.loads(compact[8 : 8 + n]), indent=1).encode()  # same entries, another spelling
    spaced += b" " * ((-len(spaced)) % 8)
    (tmp_path / SHARD).write_bytes(len(spaced).to_bytes(8, "little") + spaced + compact[8 + n :])
    ckpt = load_checkpoint(LocalSource(tmp_path))
    (shard,) = ckpt.shards
    prefix = steps.read_prefix(tmp_path / SHARD, shard)
    header, metadata = steps._parsed_view(shard, prefix)
    assert not steps._encodes_as(header, metadata, prefix[8:])
    assert steps._reader_view(shard, prefix) == (header, metadata)
    assert list(header) == [t.name for t in shard.tensors]


def _checkpoint(folder: Path, index: dict, layout) -> tuple:
    names = sorted({*index["weight_map"]})
    (folder / SHARD).write_bytes(build_file([(n, "BF16", [1], b"\x00\x00") for n in names]))
    (folder / INDEX).write_bytes(layout(index))
    return load_checkpoint(LocalSource(folder)), (folder / INDEX).read_bytes()


def HF(d: dict) -> bytes:
    return (json.dumps(d, indent=2, sort_keys=True) + "\n").encode()  # as transformers writes it


LAYOUTS = {
    "transformers": HF,
    "unsorted, no newline": lambda d: json.dumps(d, indent=2).encode(),
    "compact": lambda d: json.dumps(d, separators=(",", ":")).encode(),
    "spaced one line": lambda d: json.dumps(d).encode(),
    "four spaces, non-ASCII": lambda d: json.dumps({**d, "metadata": {"note": "für"}}, indent=4).encode(),
}
INDEXES = {
    "plain": {"metadata": {"total_size": 8}, "weight_map": dict.fromkeys(["d.w", "a.w", "c.w", "b.w"], SHARD)},
    "no metadata": {"weight_map": dict.fromkeys(["a.w", "b.w"], SHARD)},
    "metadata not an object": {"metadata": [1, 2], "weight_map": dict.fromkeys(["a.w", "b.w"], SHARD)},
    "another top-level key": {"metadata": {}, "weight_map": dict.fromkeys(["a.w", "b.w"], SHARD), "x": 1},
    "float metadata": {"metadata": {"total_size": 8, "ratio": 0.1}, "weight_map": dict.fromkeys(["a.w"], SHARD)},
}


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
@pytest.mark.parametrize("index", INDEXES.values(), ids=INDEXES.keys())
def test_index_as_the_analysis_read_it_is_the_parse(tmp_path, index, layout):
    ckpt, raw = _checkpoint(tmp_path, index, layout)
    data, as_analysed = steps._parsed_index(ckpt.index, raw)
    assert data == orjson.loads(raw) and list(data) == list(orjson.loads(raw))
    # Claimed the analysis's own index only when the file holds nothing else: its map, and its metadata if any.
    analysed = {"weight_map": dict(ckpt.index.weight_map)}
    if ckpt.index.metadata:
        analysed["metadata"] = dict(ckpt.index.metadata)
    assert not as_analysed or data == analysed
    loaded = orjson.loads(raw)
    if set(loaded) - {"weight_map", "metadata"} or not isinstance(loaded.get("metadata", {}), dict):
        assert not as_analysed
    if layout is HF and index in (INDEXES["plain"], INDEXES["no metadata"]):
        assert as_analysed
    assert list(data["weight_map"]) == list(orjson.loads(raw)["weight_map"])
    # Fresh objects: what the step changes is not the analysis's index.
    data["weight_map"]["new"] = SHARD
    if isinstance(data.get("metadata"), dict):
        data["metadata"]["new"] = 1
    assert "new" not in ckpt.index.weight_map and "new" not in ckpt.index.metadata


def test_an_index_changed_since_the_analysis_is_parsed(tmp_path):
    ckpt, raw = _checkpoint(tmp_path, INDEXES["plain"], HF)
    changed = raw.replace(b'"a.w"', b'"e.w"')
    assert steps._parsed_index(ckpt.index, changed) == (orjson.loads(changed), False)
    # ... and its step does not claim to be the analysis's index renamed.
    (tmp_path / INDEX).write_bytes(changed)
    plan = Plan("t", "t", MappingProxyType({}), MappingProxyType({"b.w": "x.w"}), frozenset())
    (step,) = steps.compile_plan(plan, ckpt, tmp_path)
    assert step.renamed_from is None


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
@pytest.mark.parametrize("index", ["plain", "metadata not an object", "no metadata"])
@pytest.mark.parametrize(
    ("renames", "drops"),
    [({"a.w": "x.w", "b.w": "y.w"}, frozenset()), ({"a.w": "x.w"}, frozenset({"d.w"})), ({}, frozenset({"b.w"}))],
)
def test_index_step_hands_on_what_it_wrote(tmp_path, layout, index, renames, drops):
    from ckpt_tools.read.configs import read_index

    ckpt, raw = _checkpoint(tmp_path, INDEXES[index], layout)
    was_sorted = list(orjson.loads(raw)["weight_map"]) == sorted(orjson.loads(raw)["weight_map"])
    plan = Plan("t", "t", MappingProxyType({}), MappingProxyType(renames), drops)
    (step,) = steps.compile_plan(plan, ckpt, tmp_path)
    (tmp_path / INDEX).write_bytes(step.new)
    read, problem = read_index(LocalSource(tmp_path), INDEX)
    assert problem is None and step.parsed is not None
    weight_map, metadata = step.parsed
    assert list(weight_map.items()) == list(read.weight_map.items())
    assert dict(metadata) == dict(read.metadata)
    assert was_sorted == (list(read.weight_map) == sorted(read.weight_map))  # a sorted map stays sorted
    # The parsed view is derived in memory: never journaled, and a journal's step is equal without it.
    journal = encode_journal("t", tmp_path, (step,))
    assert b'"parsed"' not in journal and b'"renamed_from"' not in journal
    _job, (decoded,) = decode_journal(journal, tmp_path)
    assert decoded == step and decoded.parsed is None and decoded.renamed_from is None
    # The analysis's index renamed, exactly when nothing is dropped and the file was the analysis's index.
    as_analysed = steps._parsed_index(ckpt.index, raw)[1]
    assert step.renamed_from is (ckpt.index if as_analysed and not drops else None)
    if step.renamed_from is not None:
        assert weight_map == {renames.get(k, k): f for k, f in ckpt.index.weight_map.items()}


def _sorted_reference(weight_map: dict[str, str], renames: dict[str, str]) -> dict[str, str]:
    keys = list(weight_map)
    return dict(sorted(zip(map(renames.get, keys, keys), weight_map.values(), strict=True), key=lambda kv: kv[0]))


@pytest.mark.parametrize("seed", range(40))
def test_renamed_sorted_map_is_the_sort(seed):
    # The merge of the renamed keys into the kept ones is the full sort: renames to the front, the back, between
    # neighbours, onto themselves, onto each other (a collision: the same shorter map), and keys not in the map.
    import random

    rng = random.Random(seed)
    keys = sorted({f"{rng.choice('abmyz')}.{rng.randrange(60)}.{rng.choice(['w', 's', 'q'])}" for _ in range(80)})
    weight_map = {k: f"shard-{rng.randrange(4)}" for k in keys}
    targets = [*keys, "", "0", "zzz", "m.5.w", "a.", "b.1.x"]
    renames = {k: rng.choice([rng.choice(targets), k, k + "x", "b" + k]) for k in rng.sample(keys, rng.randrange(12))}
    renames["not.in.the.map"] = "a.0.w"
    got = steps._sorted_renamed(weight_map, keys, renames)
    expected = _sorted_reference(weight_map, renames)
    assert list(got) == list(expected)  # order and keys
    if len(expected) == len(weight_map):  # no collision: the files too
        assert list(got.items()) == list(expected.items())
    assert steps._sorted_renamed(weight_map, keys, {}) == weight_map
