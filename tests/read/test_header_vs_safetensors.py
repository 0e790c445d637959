"""The header reader agrees with the safetensors library on adversarial files, byte for byte of verdict."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from safetensors import safe_open

from ckpt_tools.read.header import read_shard
from ckpt_tools.read.local import LocalSource
from ckpt_tools.write.header import build_file


def mk(header: bytes, data: bytes = b"") -> bytes:
    return struct.pack("<Q", len(header)) + header + data


T = b'"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}'
GOOD = build_file([("a", "U8", [2], b"xy"), ("b", "F8_E4M3", [2, 2], b"\x01\x02\x03\x04")])

CASES = {
    "good": GOOD,
    "leading-space": mk(b"  {" + T + b"}", b"xx"),
    "trailing-spaces": mk(b"{" + T + b"}      ", b"xx"),
    "trailing-nul": mk(b"{" + T + b"}\x00\x00", b"xx"),
    "unknown-field": mk(b'{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"x":1}}', b"xx"),
    "metadata-nonstring": mk(b'{"__metadata__":{"k":1},' + T + b"}", b"xx"),
    "metadata-null": mk(b'{"__metadata__":null,' + T + b"}", b"xx"),
    "empty-object": mk(b"{}"),
    "json-array": mk(b"[]"),
    "not-json": mk(b"{nope}"),
    "invalid-utf8": mk(b'{"\xff":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"xx"),
    "unknown-dtype": mk(b'{"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,2]}}', b"xx"),
    "negative-dim": mk(b'{"a":{"dtype":"U8","shape":[-2],"data_offsets":[0,2]}}', b"xx"),
    "gap": mk(b'{"a":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}', b"xxx"),
    "overlap": mk(
        b'{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}',
        b"xxx",
    ),
    "span-mismatch": mk(b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,2]}}', b"xx"),
    "sub-byte-misaligned": mk(b'{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}}', b"x"),
    "sub-byte-ok": mk(b'{"a":{"dtype":"F4","shape":[4],"data_offsets":[0,2]}}', b"xx"),
    "trailing-bytes": mk(b"{" + T + b"}", b"xxEXTRA"),
    "truncated-data": mk(b"{" + T + b"}", b"x"),
    "header-past-eof": struct.pack("<Q", 500) + b'{"a":',
    "header-too-large": struct.pack("<Q", 100_000_001) + b"{}",
    "tiny-file": b"\x01\x02\x03",
    "empty-file": b"",
    "scalar": mk(b'{"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}', b"abcd"),
    "zero-elements": mk(
        b'{"z":{"dtype":"BF16","shape":[0,4],"data_offsets":[0,0]},' + T.replace(b"[0,2]", b"[0,2]") + b"}", b"xx"
    ),
    "missing-offsets": mk(b'{"a":{"dtype":"U8","shape":[2]}}', b"xx"),
    "duplicate-key": mk(b"{" + T + b"," + T + b"}", b"xx"),
    "e8m0-f4-dtypes": build_file([("s", "F8_E8M0", [4], b"\x7f\x7f\x7f\x7f"), ("w", "F4", [8], b"abcd")]),
}


def library_accepts(path: Path) -> bool:
    try:
        with safe_open(str(path), "np") as fh:
            list(fh.keys())
        return True
    except Exception:  # noqa: BLE001 - the oracle: any error the reference reader raises is a rejection
        return False


@pytest.mark.parametrize("case", sorted(CASES))
def test_verdict_matches_safetensors_library(tmp_path: Path, case: str) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(CASES[case])
    result = read_shard(LocalSource(tmp_path), "model.safetensors")
    ours = result.shard is not None and result.shard.valid
    assert ours == library_accepts(path), (case, result.problems)


def test_lfs_pointer_is_recognised_not_parsed(tmp_path: Path) -> None:
    pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"ab" * 32 + b"\nsize 4970000000\n"
    (tmp_path / "model.safetensors").write_bytes(pointer)
    result = read_shard(LocalSource(tmp_path), "model.safetensors")
    assert result.shard is None and result.problems == ()
    assert result.lfs is not None and result.lfs.size == 4_970_000_000 and result.lfs.oid.startswith("sha256:ab")


def test_huge_length_field_is_never_allocated(tmp_path: Path, monkeypatch) -> None:
    """A length field of 2**63 must not make the reader ask for that many bytes."""
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 2**63) + b"{}")
    asked: list[int] = []
    source = LocalSource(tmp_path)
    original = source.read_range

    def spy(name: str, start: int, length: int) -> bytes:
        asked.append(length)
        return original(name, start, length)

    monkeypatch.setattr(source, "read_range", spy)
    result = read_shard(source, "model.safetensors")
    assert result.problems[0].kind == "header-too-large"
    assert max(asked) <= 64 * 1024


def test_large_header_read_in_two_reads(tmp_path: Path) -> None:
    tensors = [(f"t{i:06d}", "U8", [1], b"x") for i in range(3000)]  # header well over the first 64 KiB read
    (tmp_path / "model.safetensors").write_bytes(build_file(tensors))
    result = read_shard(LocalSource(tmp_path), "model.safetensors")
    assert result.shard is not None and result.shard.valid and len(result.shard.tensors) == 3000


def test_offsets_are_relative_and_metadata_kept(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(build_file([("a", "U8", [2], b"xy")], {"format": "pt"}))
    shard = read_shard(LocalSource(tmp_path), "model.safetensors").shard
    assert shard is not None and dict(shard.metadata) == {"format": "pt"}
    raw = (tmp_path / "model.safetensors").read_bytes()
    t = shard.tensors[0]
    assert raw[shard.data_start + t.begin : shard.data_start + t.end] == b"xy"
    assert shard.data_start % 8 == 0
    assert json.loads(raw[8 : shard.data_start])["a"]["data_offsets"] == [0, 2]
