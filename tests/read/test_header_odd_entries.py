"""Odd tensor entries get the safetensors reader's verdict: every value a JSON header can hold in a shape or an offset
(floats, negatives, past u64, strings, null, lists, objects, booleans with and without `true` elsewhere in the text),
odd entries and fields, offsets out of header order, spans that do not fit, the hidden overflow behind a zero
dimension, trailing bytes. Each case is written as a file and judged by the safetensors library too: plain entries
are checked inline by the reader (`header._entries_one_by_one`), anything else by `_entry`, and both must say what
the library says."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from ckpt_tools.read import header
from ckpt_tools.read.local import LocalSource

from .test_header_vs_safetensors import library_accepts

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


def _judged(tmp_path: Path, obj: dict, data_len: int) -> tuple:
    """Our verdict on the file (shard, problems), after checking that it accepts exactly what the library accepts."""
    raw = json.dumps(obj).encode()
    path = tmp_path / "m.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(max(data_len, 0)))
    read = header.read_shard(LocalSource(tmp_path), "m.safetensors")
    ours = read.shard is not None and read.shard.valid
    assert ours == library_accepts(path), read.problems
    return read.shard, read.problems


ODD_VALUES = [1.0, -1, 2**64, -(2**63) - 1, "2", None, [2], {"x": 2}, True, False]


@pytest.mark.parametrize("value", ODD_VALUES, ids=repr)
@pytest.mark.parametrize("where", ["shape", "begin", "end"])
def test_an_odd_number_is_rejected_as_the_reader_rejects_it(tmp_path: Path, where: str, value) -> None:
    obj, data_len = _header()
    entry = obj["a.weight_scale"]
    if where == "shape":
        entry["shape"] = [value, 2]
    else:
        entry["data_offsets"][0 if where == "begin" else 1] = value
    shard, problems = _judged(tmp_path, obj, data_len)
    assert shard is None and len(problems) == 1
    assert problems[0].kind in ("invalid-schema", "invalid-offset", "invalid-span"), problems


def test_a_name_holding_true_still_loads(tmp_path: Path) -> None:
    entries = [("true.false.weight", "BF16", [4, 8], 64), *ENTRIES[1:]]
    obj, data_len = _header(entries)
    shard, problems = _judged(tmp_path, obj, data_len)
    assert problems == () and shard is not None and shard.valid
    assert [t.name for t in shard.tensors] == ["true.false.weight", "a.weight_scale", "b.weight"]


def test_offsets_out_of_header_order_load_in_header_order(tmp_path: Path) -> None:
    obj, data_len = _header(order=[2, 0, 1])
    shard, problems = _judged(tmp_path, obj, data_len)
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
def test_spans_and_overflows_get_the_readers_verdict(tmp_path: Path, entries, kind) -> None:
    obj, data_len = _header(entries)
    _shard, problems = _judged(tmp_path, obj, data_len)
    assert [p.kind for p in problems] == ([kind] if kind else [])


@pytest.mark.parametrize("extra", [1, -1])
def test_the_file_length_is_checked(tmp_path: Path, extra: int) -> None:
    obj, data_len = _header()
    shard, problems = _judged(tmp_path, obj, data_len + extra)
    assert shard is None and [p.kind for p in problems] == ["incomplete-buffer"]


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
def test_an_odd_entry_gets_the_readers_verdict(tmp_path: Path, entry) -> None:
    obj, data_len = _header()
    obj["a.weight_scale"] = entry
    _judged(tmp_path, obj, data_len)


@pytest.mark.parametrize(("field", "value"), ODD_FIELDS, ids=repr)
def test_an_odd_field_gets_the_readers_verdict(tmp_path: Path, field: str, value) -> None:
    obj, data_len = _header()
    obj["a.weight_scale"][field] = value
    shard, problems = _judged(tmp_path, obj, data_len)
    # only the enum spelling of a dtype is valid; every other odd field is a problem
    assert (shard is not None and not problems) == (field == "dtype" and isinstance(value, dict))
