"""fix-prefix writes the new index as the old file with the changed weight-map entries cut out and the new ones
written in (`repair.steps._spliced_index`) instead of dumping the whole map again, and a shard header renamed in
place as the old header with the renamed keys' text replaced (`_renamed_in_place`). The bytes must be exactly the
dumps': held here on renames in the middle of the map, far across it, at its ends, a swap, escaped and non-ASCII
names, an index without metadata and one whose metadata takes the standard library's path, headers whose metadata
spells a renamed entry's text inside a string, and end to end on a sharded fixture against the plain dump."""

from __future__ import annotations

import json

import pytest

from ckpt_tools.pipeline import analyze
from ckpt_tools.repair import fix_prefix, steps
from ckpt_tools.repair.guard import resolve_local
from ckpt_tools.repair.steps import _dump_like, _sorted_renamed, _spliced_index
from tests.repair_helpers import copy_of

NAMES = [f"model.layers.{i}.{p}.weight" for i in range(12) for p in ("mlp.down_proj", "self_attn.q_proj")]


def hf_index(names, metadata=None) -> tuple[dict, bytes]:
    """An index as transformers writes it; `metadata` False: none at all."""
    data: dict = {} if metadata is False else {"metadata": metadata or {"total_size": 1234}}
    data["weight_map"] = {n: f"s{i % 3}.safetensors" for i, n in enumerate(sorted(names))}
    return data, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def both(names, renames, metadata=None):
    _data, raw = hf_index(names, metadata)
    data = json.loads(raw)  # the file's own order, as the analysis read it
    assert _dump_like(data, raw) == raw  # the splice's premise: the file is the dump of the analysed index
    weight_map = data["weight_map"]
    keys = list(weight_map)
    assert keys == sorted(keys)
    new_map = _sorted_renamed(weight_map, keys, renames)
    dumped = _dump_like({**data, "weight_map": new_map}, raw)
    return _spliced_index(raw, keys, renames, new_map), dumped


def prefix(old, new, names=NAMES):
    return {n: new + n[len(old) :] for n in names if n.startswith(old)}


SPLICED = {
    "a layer renamed in the middle": prefix("model.layers.5.", "model.layers.5b."),
    "a layer moved across the map": prefix("model.layers.3.", "model.layers.8x."),
    "one tensor renamed in place": {"model.layers.4.mlp.down_proj.weight": "model.layers.4.mlp.down.weight"},
    "two tensors swap names": {
        "model.layers.2.mlp.down_proj.weight": "model.layers.2.self_attn.q_proj.weight",
        "model.layers.2.self_attn.q_proj.weight": "model.layers.2.mlp.down_proj.weight",
    },
    "renamed to a name that sorts just before its neighbour": {
        "model.layers.6.mlp.down_proj.weight": "model.layers.5.zz"
    },
}


@pytest.mark.parametrize("renames", SPLICED.values(), ids=SPLICED.keys())
def test_the_splice_is_the_dump(renames):
    spliced, dumped = both(NAMES, renames)
    assert spliced is not None and spliced == dumped


AT_THE_ENDS = {
    "the first key renamed": {sorted(NAMES)[0]: "model.layers.0.mlp.x.weight"},
    "a new name after the last key": {"model.layers.4.mlp.down_proj.weight": "zz.weight"},
    "a new name before the first key": {"model.layers.4.mlp.down_proj.weight": "a.weight"},
    "the last key moved first": {sorted(NAMES)[-1]: "a.weight"},
    "every key renamed": {n: "x." + n for n in NAMES},
}


@pytest.mark.parametrize("renames", AT_THE_ENDS.values(), ids=AT_THE_ENDS.keys())
def test_the_splice_at_the_ends_of_the_map(renames):
    spliced, dumped = both(sorted(NAMES), renames)
    assert spliced is not None and spliced == dumped
    spliced, dumped = both(sorted(NAMES), renames, False)  # no metadata: the weight map is the file's only key
    assert spliced is not None and spliced == dumped


def test_escaped_and_non_ascii_names_are_dumped_whole():
    names = sorted([*NAMES, 'model.layers.9.q"uote.weight', "model.layers.9.caf\u00e9.weight"])
    spliced, _ = both(names, prefix("model.layers.5.", "model.layers.5b.", names))
    assert spliced is None  # json.dumps wrote escapes: not spliced
    spliced, _ = both(NAMES, {"model.layers.5.mlp.down_proj.weight": "model.layers.5.caf\u00e9"})
    assert spliced is None  # the new name would be written escaped


def test_metadata_on_the_standard_librarys_path():
    spliced, dumped = both(NAMES, prefix("model.layers.7.", "model.layers.7b."), {"total_size": 12, "ratio": 0.5})
    assert spliced is not None and spliced == dumped


def test_the_fix_prefix_index_step_is_the_plain_dump(tmp_path, monkeypatch):
    folder = copy_of("llmc-qwen3moe-nvfp4-sharded", tmp_path)
    analysis = analyze(str(folder), headers_only=True)
    plan = fix_prefix.job([("model.layers.0.self_attn", "model.layers.0.attention")]).build(analysis, str(folder))
    local = resolve_local(str(folder))
    calls: list[bool] = []
    real = steps._spliced_index

    def spy(*args):
        out = real(*args)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(steps, "_spliced_index", spy)
    spliced = steps._index_step(local.root, analysis.checkpoint, plan)
    assert calls == [True]
    monkeypatch.setattr(steps, "_spliced_index", lambda *args: None)
    plain = steps._index_step(local.root, analysis.checkpoint, plan)
    assert spliced is not None and plain is not None
    assert spliced.new == plain.new and spliced.parsed == plain.parsed and spliced.note == plain.note


# ---- shard headers renamed in place ---------------------------------------------------------------------------------


def _shard(names, metadata=None):
    from ckpt_tools.model.tensors import Shard, TensorInfo
    from ckpt_tools.write.header import encode_header

    tensors = tuple(TensorInfo(n, "BF16", (2, 3), "s", 12 * k, 12 * k + 12) for k, n in enumerate(names))
    view = steps._entries_of(tensors)
    raw = encode_header(view, metadata, min_length=len(encode_header(view, metadata)) + 40)  # room to grow
    return Shard("s", 8 + len(raw) + 12 * len(names), len(raw), metadata, tensors, True), view, raw


HEADER_CASES = {
    "a middle tensor": {"b.weight": "bb.weight"},
    "the first and the last": {"a.weight": "x.a.weight", 'z"q.weight': "z.weight"},
    "escaped and non-ASCII names": {"caf\u00e9.weight": "cafe.weight", "d\\e.weight": "d\\\\e\u00e9.weight"},
    "every tensor": {n: "m." + n for n in ("a.weight", "b.weight", "caf\u00e9.weight", "d\\e.weight", 'z"q.weight')},
}


@pytest.mark.parametrize("renames", HEADER_CASES.values(), ids=HEADER_CASES.keys())
@pytest.mark.parametrize("metadata", [None, {"format": "pt", "note": '"b.weight":{"dtype":'}])
def test_a_header_renamed_in_place_is_its_encoding(renames, metadata):
    from ckpt_tools.write.header import encode_header

    shard, view, raw = _shard(["a.weight", "b.weight", "caf\u00e9.weight", "d\\e.weight", 'z"q.weight'], metadata)
    renamed = {renames.get(k, k): v for k, v in view.items()}
    got = steps._renamed_in_place(raw, shard, renames)
    assert got is not None and got == encode_header(renamed, metadata, exact_length=len(raw))


def test_a_header_that_outgrows_its_length_is_not_renamed_in_place():
    shard, _view, raw = _shard(["a.weight", "b.weight"])
    assert steps._renamed_in_place(raw, shard, {"a.weight": "a" * 200 + ".weight"}) is None
