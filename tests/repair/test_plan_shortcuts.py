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
from ckpt_tools.repair.edits import Plan
from ckpt_tools.repair.journal import decode_journal, encode_journal
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


def _reference_plan(ckpt, pairs) -> tuple[dict, dict]:
    """fix-prefix's shard edits and index renames the plain way: every shard's names and every index key tested."""
    renames = {}
    for name in ckpt.tensors:
        pair = next(((o, n) for o, n in pairs if name.startswith(o)), None)
        if pair:
            renames[name] = pair[1] + name[len(pair[0]) :]
    edits = {}
    for shard in ckpt.shards:
        mine = {t.name: renames[t.name] for t in shard.tensors if t.name in renames}
        if mine:
            edits[shard.name] = mine
    index_renames = {}
    for key in ckpt.index.weight_map:
        pair = next(((o, n) for o, n in pairs if key.startswith(o)), None)
        if pair:
            index_renames[key] = pair[1] + key[len(pair[0]) :]
    return edits, index_renames


def _plan_of(folder: Path):
    from ckpt_tools.pipeline import analyze
    from ckpt_tools.repair import fix_prefix

    analysis = analyze(str(folder), headers_only=True)
    plan = fix_prefix.finding_plan(analysis)
    pairs = [(step["from"], step["to"]) for step in plan.details["rename"]]
    edits, index_renames = _reference_plan(analysis.checkpoint, pairs)
    # The same shards in the same order, each with its renames in header order, and the same index renames.
    assert [(file, list(edit.renames.items())) for file, edit in plan.edits.items()] == [
        (file, list(mine.items())) for file, mine in edits.items()
    ]
    assert dict(plan.index_renames) == index_renames
    return analysis, plan


PREFIX = "model.language_model.visual."


def _sharded(tmp_path: Path) -> Path:
    from tests.repair_helpers import copy_of, make_sharded

    return make_sharded(copy_of("defective/qwen35moe-nvfp4-misnested-vision", tmp_path), parts=3)


def test_fix_prefix_plan_from_the_tensor_map_is_the_plain_one(tmp_path):
    from ckpt_tools.rules.ck103_index_tensor_mismatch import known_where_indexed

    analysis, plan = _plan_of(_sharded(tmp_path))
    ckpt = analysis.checkpoint
    # The shortcuts applied: every shard loads, no name twice, and CK103 found the index's keys to be the tensors.
    assert len(ckpt.loaded_shards) == len(ckpt.shards) == 3 and not ckpt.duplicate_tensors
    assert known_where_indexed(ckpt) and plan.edits and plan.index_renames


def test_fix_prefix_plan_renames_a_stray_copy_too(tmp_path):
    """A stray shard (no index entry names it) holding a copy of a renamed tensor: the tensor map does not list it, so
    only the pass over every shard's names gives that shard its edit."""
    folder = _sharded(tmp_path)
    name = next(k for k in json.loads((folder / INDEX).read_text())["weight_map"] if k.startswith(PREFIX))
    (folder / "model-extra.safetensors").write_bytes(build_file([(name, "BF16", [1], b"\x00\x00")]))
    _analysis, plan = _plan_of(folder)
    assert dict(plan.edits["model-extra.safetensors"].renames) == {name: "model.visual." + name[len(PREFIX) :]}


def test_fix_prefix_plan_renames_index_keys_of_absent_tensors(tmp_path):
    """An index as long as the tensor map whose keys are not the tensors (one tensor unlisted, a key under the prefix
    for a tensor no shard holds): only the pass over the index's keys renames the absent one."""
    from ckpt_tools.rules.ck103_index_tensor_mismatch import known_where_indexed

    folder = _sharded(tmp_path)
    index = json.loads((folder / INDEX).read_text())
    unlisted = next(k for k in index["weight_map"] if not k.startswith(PREFIX))
    index["weight_map"][PREFIX + "absent.weight"] = index["weight_map"].pop(unlisted)
    (folder / INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    analysis, plan = _plan_of(folder)
    assert len(analysis.checkpoint.index.weight_map) == len(analysis.checkpoint.tensors)
    assert not known_where_indexed(analysis.checkpoint)
    assert plan.index_renames[PREFIX + "absent.weight"] == "model.visual.absent.weight"
