"""Hostile headers: the verdict equals the safetensors reader's on every class the differential fuzzer found, no
header ends in an exception (CLI or API), a huge shape is judged in linear time, and no repair rewrites a shard the
reader rejects or reads by dropping an entry."""

from __future__ import annotations

import contextlib
import json
import math
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors import safe_open

from ckpt_tools import analyze, check_serve, doctor, serve_flags
from ckpt_tools.errors import CkptError
from ckpt_tools.read.header import read_shard
from ckpt_tools.read.local import LocalSource
from tests.read.test_header_vs_safetensors import library_accepts
from tests.repair_helpers import MISNESTED_FIXTURE, copy_of, file_bytes, run_cli

E = '"dtype":"F32","shape":[1],"data_offsets":[0,4]'  # a valid entry body over 4 data bytes


def entry(extra: str) -> str:
    return '{"a":{%s,%s}}' % (E, extra)


def deep(levels: int) -> str:
    """A header whose deepest container is at depth `levels` (the header object is depth 1)."""
    inner = "[" * (levels - 2) + "]" * (levels - 2)
    return entry(f'"x":{inner}')


# (header JSON, does the reader accept it?) for every disagreement class the fuzzer found, plus their edges.
CASES = {
    "dup-dtype-field": ('{"a":{"dtype":"F16",%s}}' % E, False),
    "dup-shape-field": ('{"a":{"shape":[1],%s}}' % E, False),
    "dup-offsets-field": ('{"a":{%s,"data_offsets":[0,4]}}' % E, False),
    "dup-field-escaped-key": ('{"a":{"d\\u0074ype":"F32",%s}}' % E, False),
    "dup-unknown-field": (entry('"x":1,"x":2'), True),
    "dup-metadata": ('{"__metadata__":{},"__metadata__":{"k":"v"},"a":{%s}}' % E, False),
    "dup-metadata-null": ('{"__metadata__":null,"__metadata__":null,"a":{%s}}' % E, False),
    "dup-key-inside-metadata": ('{"__metadata__":{"k":"1","k":"2"},"a":{%s}}' % E, True),
    "dup-name-last-wins": ('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{%s}}' % E, True),
    "dup-name-first-invalid": ('{"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]},"a":{%s}}' % E, False),
    "depth-127": (deep(127), True),
    "depth-128": (deep(128), False),
    "depth-129": (deep(129), False),
    "depth-1030": (deep(1030), False),
    "depth-5000": (deep(5000), False),
    "overflow-before-zero": (
        '{"a":{"dtype":"U8","shape":[4294967296,4294967296,0],"data_offsets":[0,0]},"b":{%s}}' % E,
        False,
    ),
    "zero-before-overflow": (
        '{"a":{"dtype":"U8","shape":[0,4294967296,4294967296],"data_offsets":[0,0]},"b":{%s}}' % E,
        True,
    ),
    "bit-count-overflow": (
        '{"a":{"dtype":"F32","shape":[4611686018427387904,0],"data_offsets":[0,0]},"b":{%s}}' % E,
        True,
    ),
    "bit-count-overflow-nonzero": (
        '{"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]},"b":{%s}}' % E,
        False,
    ),
    "u64-max-dim-then-zero": (
        '{"a":{"dtype":"U8","shape":[18446744073709551615,0],"data_offsets":[0,0]},"b":{%s}}' % E,
        True,
    ),
    "2^64-dim": ('{"a":{"dtype":"U8","shape":[18446744073709551616,0],"data_offsets":[0,0]},"b":{%s}}' % E, False),
    "negzero-offset": ('{"a":{"dtype":"F32","shape":[1],"data_offsets":[-0,4]}}', False),
    "negzero-dim": ('{"a":{"dtype":"F32","shape":[-0],"data_offsets":[0,0]},"b":{%s}}' % E, False),
    "negzero-unknown-field": (entry('"x":-0'), True),
    "negzero-in-a-string": ('{"__metadata__":{"date":"2024-01-02","k":"[-0]"},"a":{%s}}' % E, True),
    "array-entry": ('{"a":["F32",[1],[0,4]]}', True),
    "array-entry-2": ('{"a":["F32",[1]]}', False),
    "array-entry-4": ('{"a":["F32",[1],[0,4],0]}', False),
    "enum-map-dtype": ('{"a":{"dtype":{"F32":null},"shape":[1],"data_offsets":[0,4]}}', True),
    "enum-map-dtype-repeated": ('{"a":{"dtype":{"F32":null,"F32":null},"shape":[1],"data_offsets":[0,4]}}', False),
    "enum-map-dtype-empty-map": ('{"a":{"dtype":{"F32":{}},"shape":[1],"data_offsets":[0,4]}}', False),
    "5000-digit-dim": ('{"a":{"dtype":"F32","shape":[%s],"data_offsets":[0,4]}}' % ("1" * 5000), False),
    "5000-digit-unknown-field": (entry('"x":%s' % ("9" * 5000)), False),
    "5000-digit-dtype": ('{"a":{"dtype":%s,"shape":[1],"data_offsets":[0,4]}}' % ("7" * 5000), False),
    "5000-digit-with-dup-name": ('{"a":{%s},"a":{%s,"x":%s}}' % (E, E, "9" * 5000), False),
    "depth-1010-with-dup-name": ('{"a":{%s},"a":{%s,"x":%s}}' % (E, E, "[" * 1010 + "]" * 1010), False),
    "15000-dims-of-2": ('{"a":{"dtype":"U8","shape":[%s],"data_offsets":[0,4]}}' % ",".join(["2"] * 15000), False),
    "300-digit-unknown-field": (entry('"x":%s' % ("9" * 300)), True),
    "f64-edge-serde-rounds-up": (entry('"x":1.7976931348623158e308'), False),
    "f64-max": (entry('"x":1.7976931348623157e308'), True),
    "lone-surrogate-name": ('{"\\ud800":{%s}}' % E, False),
    # Found by the fuzzer: orjson refuses to encode the int below i64's minimum, which is no lone surrogate.
    "surrogate-pair-and-below-i64-in-repeated-field": (
        '{"a":{"dtype":"F32","x":"\\ud83d\\ude00","shape":[1],"x":-9223372036854775809,"data_offsets":[0,4]}}',
        True,
    ),
    "surrogate-pair-name": ('{"\\ud83d\\ude00":{%s}}' % E, True),
    # The whole-list fast path compares value types: a bool or float equal to an int seen earlier is still refused.
    "bool-dim-after-equal-int": (
        '{"a":{"dtype":"U8","shape":[2,1],"data_offsets":[0,2]},'
        '"b":{"dtype":"U8","shape":[2,true],"data_offsets":[2,4]}}',
        False,
    ),
    "float-dim-after-equal-int": (
        '{"a":{"dtype":"U8","shape":[2,1],"data_offsets":[0,2]},'
        '"b":{"dtype":"U8","shape":[2,1.0],"data_offsets":[2,4]}}',
        False,
    ),
    "bool-offset-after-equal-int": (
        '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[3],"data_offsets":[true,4]}}',
        False,
    ),
    "offsets-out-of-header-order": (
        '{"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}',
        True,
    ),
    # Nested past orjson's encoding limit (254 levels), inside and past serde's own (128).
    "shape-nested-254": (
        '{"a":{"dtype":"F32","shape":%s,"data_offsets":[0,4]}}' % ("[" * 254 + "1" + "]" * 254),
        False,
    ),
    "shape-nested-1020": ('{"a":{"dtype":"F32","shape":%s,"data_offsets":[0,4]}}' % ("[" * 1020 + "]" * 1020), False),
    "offsets-nested-254": (
        '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,%s]}}' % ("[" * 253 + "4" + "]" * 253),
        False,
    ),
    "offsets-nested-1020": ('{"a":{"dtype":"F32","shape":[1],"data_offsets":%s}}' % ("[" * 1020 + "]" * 1020), False),
    "u64-max-dims-then-zero": (
        '{"a":{"dtype":"U8","shape":[%s,0],"data_offsets":[0,0]},"b":{%s}}' % (",".join([str(2**64 - 1)] * 80), E),
        False,
    ),
    "span-mismatch-in-order": (
        '{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[3],"data_offsets":[2,4]}}',
        False,
    ),
}


def write_shard(folder: Path, header: str, data: bytes = b"\x00" * 4, name: str = "model.safetensors") -> Path:
    raw = header.encode("utf-8")
    path = folder / name
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


@pytest.mark.parametrize("case", sorted(CASES))
def test_verdict_equals_the_reader(tmp_path: Path, case: str) -> None:
    header, accepted = CASES[case]
    path = write_shard(tmp_path, header)
    assert library_accepts(path) is accepted  # the expectation itself is checked against the real reader
    result = read_shard(LocalSource(tmp_path), path.name)
    ours = result.shard is not None and result.shard.valid
    assert ours is accepted, (case, result.problems)
    if accepted:
        with safe_open(str(path), "np") as fh:
            assert sorted(t.name for t in result.shard.tensors) == sorted(fh.keys())


@pytest.mark.parametrize(
    ("case", "kind"),
    [
        ("dup-dtype-field", "duplicate-field"),
        ("dup-metadata", "duplicate-field"),
        ("depth-128", "nesting-too-deep"),
        ("depth-5000", "nesting-too-deep"),
        ("overflow-before-zero", "shape-overflow"),
        ("bit-count-overflow-nonzero", "shape-overflow"),
        ("negzero-offset", "invalid-schema"),
        ("5000-digit-dim", "invalid-json"),
        ("dup-name-last-wins", "duplicate-key"),
    ],
)
def test_problem_kind_names_the_reason(tmp_path: Path, case: str, kind: str) -> None:
    write_shard(tmp_path, CASES[case][0])
    problems = read_shard(LocalSource(tmp_path), "model.safetensors").problems
    assert [p.kind for p in problems] == [kind], problems
    assert all(len(p.message) < 400 for p in problems)  # bounded, whatever the header holds


def doctor_json(folder: Path, timeout: float = 300) -> tuple[int, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt_tools.cli.main", "doctor", str(folder), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def ck104_kinds(report: dict) -> list[str]:
    return [f["details"]["kind"] for f in report["findings"] if f["code"] == "CK104"]


def test_80000_dimension_shapes_through_doctor(tmp_path: Path) -> None:
    """Quadratic before (17-44 s): the element count grew to an 80,000-bit integer. The timeout is a guard only."""
    twos, ones = tmp_path / "twos", tmp_path / "ones"
    twos.mkdir(), ones.mkdir()
    write_shard(twos, '{"a":{"dtype":"U8","shape":[%s],"data_offsets":[0,1]}}' % ",".join(["2"] * 80_000), b"x")
    write_shard(ones, '{"a":{"dtype":"U8","shape":[%s],"data_offsets":[0,1]}}' % ",".join(["1"] * 80_000), b"x")
    assert not library_accepts(twos / "model.safetensors") and library_accepts(ones / "model.safetensors")
    code, report = doctor_json(twos)
    assert code == 1 and ck104_kinds(report) == ["shape-overflow"]
    code, report = doctor_json(ones)
    assert ck104_kinds(report) == [] and report["checkpoint"]["tensors"] == 1


def test_huge_dimensions_before_a_zero_in_linear_time(tmp_path: Path) -> None:
    """20,000 dimensions of 2**64 - 1 then a 0: 3.4 s before (the element count grew to a 1.3-million-bit integer
    before the overflow test; 80,000 dimensions 37 s), now the first partial product past 64 bits stops it, as the
    reader's `checked_mul` does."""
    dims = ",".join([str(2**64 - 1)] * 20_000)
    write_shard(tmp_path, '{"a":{"dtype":"U8","shape":[%s,0],"data_offsets":[0,0]},"b":{%s}}' % (dims, E))
    assert not library_accepts(tmp_path / "model.safetensors")
    started = time.perf_counter()
    problems = read_shard(LocalSource(tmp_path), "model.safetensors").problems
    assert time.perf_counter() - started < 1.0
    assert [p.kind for p in problems] == ["shape-overflow"]


HOSTILE = [
    "shape-nested-254",
    "offsets-nested-1020",
    "u64-max-dims-then-zero",
    "dup-dtype-field",
    "depth-1030",
    "depth-5000",
    "5000-digit-dim",
    "5000-digit-unknown-field",
    "5000-digit-dtype",
    "5000-digit-with-dup-name",
    "depth-1010-with-dup-name",
    "15000-dims-of-2",
    "overflow-before-zero",
    "lone-surrogate-name",
    "array-entry",
    "enum-map-dtype",
]


@pytest.mark.parametrize("case", HOSTILE)
def test_api_returns_a_report_or_raises_ckpt_error(tmp_path: Path, case: str) -> None:
    write_shard(tmp_path, CASES[case][0])
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}')
    accepted = CASES[case][1]
    report = doctor(tmp_path)
    assert (ck104_kinds(report.to_dict()) == []) is accepted
    assert analyze(str(tmp_path)).report.findings == report.findings
    for call in (lambda: serve_flags(str(tmp_path)), lambda: check_serve(str(tmp_path), ["vllm", "serve", "x"])):
        with contextlib.suppress(CkptError):  # a one-line refusal is fine; a built-in exception is not
            call()


@pytest.mark.parametrize(
    "command",
    [
        ["doctor"],
        ["inspect"],
        ["serve-flags"],
        ["fix-prefix"],
        ["scrub-nan"],
        ["fix"],
        ["drop-orphans", "--tensor", "a"],
    ],
)
def test_no_command_fails_internally_on_a_hostile_header(tmp_path: Path, capsys, command: list[str]) -> None:
    for case in (
        "shape-nested-254",
        "offsets-nested-254",
        "depth-1010-with-dup-name",
        "15000-dims-of-2",
        "dup-metadata",
        "overflow-before-zero",
        "array-entry",
        "enum-map-dtype",
        "dup-name-last-wins",
    ):
        folder = tmp_path / case
        folder.mkdir()
        write_shard(folder, CASES[case][0])
        code, _out, err = run_cli([command[0], folder, *command[1:]], capsys)
        assert "internal error" not in err and "Traceback" not in err, (case, err)
        assert code in (0, 1, 2), (case, code)


def _with_duplicate_dtype_field(path: Path) -> None:
    """Repeat the first entry's dtype field (same value, so a last-wins reader sees no change): the reader rejects."""
    blob = path.read_bytes()
    (n,) = struct.unpack_from("<Q", blob)
    header = blob[8 : 8 + n].rstrip(b" ")
    at = header.index(b'"dtype":')
    end = header.index(b",", at)
    header = header[:end] + b"," + header[at:end] + header[end:]
    path.write_bytes(struct.pack("<Q", len(header)) + header + blob[8 + n :])


@pytest.mark.parametrize("args", [["fix-prefix"], ["fix"]])
def test_repair_refuses_a_shard_the_reader_rejects(tmp_path: Path, capsys, args: list[str]) -> None:
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    _with_duplicate_dtype_field(folder / "model.safetensors")
    assert not library_accepts(folder / "model.safetensors")
    before = file_bytes(folder)
    code, out, err = run_cli([args[0], folder, *args[1:]], capsys)
    assert code == 2, (out, err)
    assert err.startswith("ckpt: ") and err.count("\n") == 1, err
    assert "repeats its `dtype` field" in err, err
    assert file_bytes(folder) == before


def test_repair_steps_refuse_what_the_reader_rejects(tmp_path: Path) -> None:
    """The step compiler re-reads each shard itself: a header that turned hostile after the analysis (same length,
    same size) is refused there too, not rewritten keeping the last duplicate."""
    from ckpt_tools.read import open_source
    from ckpt_tools.read.loader import load_checkpoint
    from ckpt_tools.repair.edits import Plan, ShardEdit
    from ckpt_tools.repair.steps import compile_plan

    good = '{"a":{%s},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}' % E
    hostile = '{"a":{%s},"b":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[4,8]}}' % E
    path = write_shard(tmp_path, good + " " * (len(hostile) - len(good)), b"\x00" * 8)
    ckpt = load_checkpoint(open_source(str(tmp_path)))
    assert ckpt.shards[0].valid and not ckpt.problems
    write_shard(tmp_path, hostile, b"\x00" * 8)
    assert path.stat().st_size == ckpt.shards[0].size
    plan = Plan(job="fix-prefix", summary="rename", edits={"model.safetensors": ShardEdit(renames={"a": "c"})})
    with pytest.raises(CkptError, match="repeats its `dtype` field"):
        compile_plan(plan, ckpt, tmp_path)


@pytest.mark.parametrize(
    "token",
    [
        str(2**64 - 1),
        str(2**64),
        str(-(2**63)),
        str(-(2**63) - 1),
        "1" + "0" * 299,
        "-" + "9" * 299,
        "1" + "0" * 300,
        "0000000000000000000",
    ],
)
def test_long_integer_tokens_read_as_serde_json_reads_them(token: str) -> None:
    """`_serde_int` reads 19-300 character integers with `int` (80,000 twenty-digit dimensions on the exact path
    took the digit-by-digit emulation 1.4 s under load): the same type, and the same value where it is an int."""
    from ckpt_tools.read.header_json import _serde_int, serde_number

    ours, serde = _serde_int(token), serde_number(token)
    assert type(ours) is type(serde)
    assert ours == serde if type(serde) is int else math.isfinite(ours) and math.isfinite(serde)
