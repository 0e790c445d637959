"""Compiling a plan (`repair.steps`): shard headers are read again as the reader reads them, the index step writes
the plan's renames and drops in the file's own layout, and fix-prefix's plan renames every copy and index key under
the prefix."""

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

INDEX = "model.safetensors.index.json"
SHARD = "model-00001-of-00001.safetensors"


def test_a_header_in_another_spelling_is_read_as_the_reader_reads_it(tmp_path):
    compact = build_file([("b.w", "BF16", [1], b"\x00\x00"), ("a.w", "F32", [1], b"\x00" * 4)])
    (n,) = struct.unpack("<Q", compact[:8])
    spaced = json.dumps(json.loads(compact[8 : 8 + n]), indent=1).encode()  # same entries, another spelling
    spaced += b" " * ((-len(spaced)) % 8)
    (tmp_path / SHARD).write_bytes(len(spaced).to_bytes(8, "little") + spaced + compact[8 + n :])
    ckpt = load_checkpoint(LocalSource(tmp_path))
    (shard,) = ckpt.shards
    header, metadata = steps._reader_view(shard, steps.read_prefix(tmp_path / SHARD, shard))
    assert list(header) == [t.name for t in shard.tensors] and metadata is None


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
}


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
@pytest.mark.parametrize("index", ["plain", "metadata not an object", "no metadata"])
@pytest.mark.parametrize(
    ("renames", "drops"),
    [({"a.w": "x.w", "b.w": "y.w"}, frozenset()), ({"a.w": "x.w"}, frozenset({"d.w"})), ({}, frozenset({"b.w"}))],
)
def test_index_step_writes_the_plan_in_the_files_layout(tmp_path, layout, index, renames, drops):
    from ckpt_tools.read.configs import read_index

    ckpt, raw = _checkpoint(tmp_path, INDEXES[index], layout)
    was_sorted = list(orjson.loads(raw)["weight_map"]) == sorted(orjson.loads(raw)["weight_map"])
    plan = Plan("t", "t", MappingProxyType({}), MappingProxyType(renames), drops)
    (step,) = steps.compile_plan(plan, ckpt, tmp_path)
    (tmp_path / INDEX).write_bytes(step.new)
    read, problem = read_index(LocalSource(tmp_path), INDEX)
    assert problem is None
    old = orjson.loads(raw)["weight_map"]
    assert dict(read.weight_map) == {renames.get(k, k): f for k, f in old.items() if k not in drops}
    assert was_sorted == (list(read.weight_map) == sorted(read.weight_map))  # a sorted map stays sorted
    journal = encode_journal("t", tmp_path, (step,))
    _job, (decoded,) = decode_journal(journal, tmp_path)
    assert decoded == step


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
    analysis, plan = _plan_of(_sharded(tmp_path))
    ckpt = analysis.checkpoint
    # The shortcuts applied: every shard loads, no name twice, and the index's keys are the tensors.
    assert len(ckpt.loaded_shards) == len(ckpt.shards) == 3 and not ckpt.duplicate_tensors
    assert ckpt.index.weight_map.keys() == ckpt.tensors.keys() and plan.edits and plan.index_renames


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
    folder = _sharded(tmp_path)
    index = json.loads((folder / INDEX).read_text())
    unlisted = next(k for k in index["weight_map"] if not k.startswith(PREFIX))
    index["weight_map"][PREFIX + "absent.weight"] = index["weight_map"].pop(unlisted)
    (folder / INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    analysis, plan = _plan_of(folder)
    assert len(analysis.checkpoint.index.weight_map) == len(analysis.checkpoint.tensors)
    assert analysis.checkpoint.index.weight_map.keys() != analysis.checkpoint.tensors.keys()
    assert plan.index_renames[PREFIX + "absent.weight"] == "model.visual.absent.weight"
