"""The whole-list fast path of the header reader (`_plain_entries`, `_in_order_end`) gives exactly the verdict of the
entry-by-entry path and the sorted layout walk, value by value: every number a JSON header can hold in a shape or an
offset (floats, negatives, past u64, strings, null, lists, objects, booleans with and without `true` elsewhere in the
text), offsets out of header order, spans that do not fit, the hidden overflow behind a zero dimension, trailing
bytes. The fuzz test compares both with the safetensors reader itself."""

from __future__ import annotations

import json
import struct

import pytest

from ckpt_tools.read import header

ENTRIES = [
    ("a.weight", "BF16", [4, 8], 64),
    ("a.weight_scale", "F8_E4M3", [4, 2], 8),
    ("b.weight", "F32", [2, 2, 2], 32),
]


def _header(entries=ENTRIES, order=None) -> tuple[dict, int]:
    out: dict = {"__metadata__": {"format": "pt"}}
    offsets, at = {}, 0
    for name, _dtype, _shape, span in entries:
        offsets[name] = [at, at + span]
        at += span
    for i in order or range(len(entries)):
        name, dtype, shape, _span = entries[i]
        out[name] = {"dtype": dtype, "shape": shape, "data_offsets": offsets[name]}
    return out, at


def _verdict(raw: bytes, data_len: int):
    read = header.parse_header("m.safetensors", 8 + len(raw) + data_len, raw)
    return read.shard, read.problems


def _both(raw: bytes, data_len: int, monkeypatch) -> tuple:
    fast = _verdict(raw, data_len)
    with monkeypatch.context() as m:
        m.setattr(header, "_plain_entries", lambda *args: None)  # every entry through `_entries_one_by_one`
        slow = _verdict(raw, data_len)
    assert fast == slow
    return fast


ODD_VALUES = [1.0, -1, 2**64, -(2**63) - 1, "2", None, [2], {"x": 2}, True, False]


@pytest.mark.parametrize("value", ODD_VALUES, ids=repr)
@pytest.mark.parametrize("where", ["shape", "begin", "end"])
def test_an_odd_number_gets_the_entry_by_entry_verdict(where: str, value, monkeypatch) -> None:
    obj, data_len = _header()
    entry = obj["a.weight_scale"]
    if where == "shape":
        entry["shape"] = [value, 2]
    else:
        entry["data_offsets"][0 if where == "begin" else 1] = value
    raw = json.dumps(obj).encode()
    shard, problems = _both(raw, data_len, monkeypatch)
    assert shard is None and len(problems) == 1
    assert problems[0].kind in ("invalid-schema", "invalid-offset", "invalid-span"), problems


def test_a_name_holding_true_takes_the_typed_checks_and_still_loads(monkeypatch) -> None:
    entries = [("true.false.weight", "BF16", [4, 8], 64), *ENTRIES[1:]]
    obj, data_len = _header(entries)
    shard, problems = _both(json.dumps(obj).encode(), data_len, monkeypatch)
    assert problems == () and shard is not None and shard.valid
    assert [t.name for t in shard.tensors] == ["true.false.weight", "a.weight_scale", "b.weight"]


def test_offsets_out_of_header_order_are_judged_by_the_sorted_walk(monkeypatch) -> None:
    obj, data_len = _header(order=[2, 0, 1])
    shard, problems = _both(json.dumps(obj).encode(), data_len, monkeypatch)
    assert problems == () and shard is not None and [t.name for t in shard.tensors] == list(obj)[1:]


@pytest.mark.parametrize(
    ("entries", "kind"),
    [
        ([("a.weight", "BF16", [4, 8], 63)], "invalid-span"),
        ([("a.weight", "F4", [3], 2)], "misaligned-slice"),
        ([("a.weight", "BF16", [2**40, 2**40, 0], 0)], "shape-overflow"),
        ([("a.weight", "BF16", [2**62, 2**2], 8)], "shape-overflow"),
        ([("a.weight", "BF16", [0, 2**40, 2**40], 0)], None),
    ],
)
def test_span_checks_per_distinct_triple_match_the_walk(entries, kind, monkeypatch) -> None:
    obj, data_len = _header(entries)
    _shard, problems = _both(json.dumps(obj).encode(), max(data_len, 0), monkeypatch)
    assert [p.kind for p in problems] == ([kind] if kind else [])


@pytest.mark.parametrize("extra", [1, -1])
def test_the_file_length_is_still_checked(extra: int, monkeypatch) -> None:
    obj, data_len = _header()
    shard, problems = _both(json.dumps(obj).encode(), data_len + extra, monkeypatch)
    assert shard is None and [p.kind for p in problems] == ["incomplete-buffer"]


def test_the_length_prefix_path_reads_the_same(tmp_path, monkeypatch) -> None:
    """Through `read_shard` and a real file as well: same tensors, both paths."""
    from ckpt_tools.read.local import LocalSource

    obj, data_len = _header()
    raw = json.dumps(obj).encode()
    (tmp_path / "m.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(data_len))
    fast = header.read_shard(LocalSource(tmp_path), "m.safetensors")
    monkeypatch.setattr(header, "_plain_entries", lambda *args: None)
    assert header.read_shard(LocalSource(tmp_path), "m.safetensors") == fast
    assert fast.shard is not None and fast.shard.valid and len(fast.shard.tensors) == 3


ODD_ENTRIES = [
    ["F8_E4M3", [4, 2], [64, 72]],  # an array entry: serde reads it in field order
    "F8_E4M3",
    7,
    None,
    {"dtype": "F8_E4M3", "shape": [4, 2]},
    {"dtype": "F8_E4M3", "shape": [4, 2], "data_offsets": [64, 72], "extra": 1},
    {"dtype": "F8_E4M3", "shape": [4, 2], "offsets": [64, 72]},
]
ODD_FIELDS = [
    ("dtype", "E4M3"),
    ("dtype", 1),
    ("dtype", True),
    ("dtype", None),
    ("dtype", ["F8_E4M3"]),
    ("dtype", {"F8_E4M3": None}),  # serde's enum-map spelling: loads
    ("shape", "42"),
    ("shape", {"a": 4, "b": 2}),
    ("shape", 8),
    ("data_offsets", "ab"),
    ("data_offsets", {"0": 64, "1": 72}),
    ("data_offsets", [64]),
    ("data_offsets", [64, 72, 80]),
    ("data_offsets", 64),
    ("data_offsets", None),
]


@pytest.mark.parametrize("entry", ODD_ENTRIES, ids=repr)
def test_an_odd_entry_gets_the_entry_by_entry_verdict(entry, monkeypatch) -> None:
    obj, data_len = _header()
    obj["a.weight_scale"] = entry
    _both(json.dumps(obj).encode(), data_len, monkeypatch)


@pytest.mark.parametrize(("field", "value"), ODD_FIELDS, ids=repr)
def test_an_odd_field_gets_the_entry_by_entry_verdict(field: str, value, monkeypatch) -> None:
    obj, data_len = _header()
    obj["a.weight_scale"][field] = value
    shard, problems = _both(json.dumps(obj).encode(), data_len, monkeypatch)
    # only the enum spelling of a dtype is valid; every other odd field is a problem
    assert (shard is not None and not problems) == (field == "dtype" and isinstance(value, dict))
