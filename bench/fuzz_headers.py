"""Differential fuzzer: ckpt_tools' header verdict against the safetensors reader, on files written to a temp dir.

Each case is a structure-aware header (dtypes, shapes, offsets, metadata) put through a few mutations: repeated
fields, names and `__metadata__`, escaped key spellings, entries written as arrays or enum maps, numbers at the u64 /
i64 / f64 limits, `-0`, nesting around the reader's 128-level limit and far past it, unicode and lone surrogates,
overflowing shapes, `shape` / `data_offsets` nested up to 1,030 levels, dimension lists of up to 80,000 big
integers with or without a zero, trailing bytes, wrong length fields and raw byte flips. A case agrees when both sides accept
(with the same tensor names) or both reject; any exception in ckpt_tools is a failure.

    python bench/fuzz_headers.py --cases 100000 --seed 1      # the long run (about 3-6 minutes on one core)
    python bench/fuzz_headers.py --big                        # 100 MB hostile headers, one subprocess each

Prints cases, disagreements, exceptions, the slowest case (ours and the reader's) and peak RSS; exits 1 on any
disagreement or exception, printing the first few reproducers (the seed and case number rebuild them).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DTYPES = [
    "BOOL",
    "F4",
    "F6_E2M3",
    "F6_E3M2",
    "U8",
    "I8",
    "F8_E5M2",
    "F8_E4M3",
    "F8_E8M0",
    "F8_E4M3FNUZ",
    "F8_E5M2FNUZ",
    "I16",
    "U16",
    "F16",
    "BF16",
    "I32",
    "U32",
    "F32",
    "C64",
    "F64",
    "I64",
    "U64",
]
BITS = {
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}
NUMBERS = [
    "0",
    "-0",
    "1",
    "-1",
    "0.0",
    "-0.0",
    "1e0",
    "1E2",
    "1.5",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "4294967296",
    "1e308",
    "1e309",
    "-1e309",
    "1.7976931348623157e308",
    "1.7976931348623158e308",
    "1.7976931348623159e308",
    "1e-400",
    "0e99999999999",
    "1e2147483648",
    "0.1e310",
    "10e307",
    "1" * 309,
    "1" * 310,
    "1" * 5000,
    "0." + "0" * 400 + "1",
    "1844674407370955161" + "5.5e289",
    "123456789",
]
NAMES = [
    "a",
    "",
    "model.layers.0.mlp.experts.0.up_proj.weight",
    "x:y",
    "date-01",
    "\u00e9t\u00e9",
    "\U0001f600",
    "__metadata__x",
    "dtype",
    "shape",
    "data_offsets",
    "-0",
    "a\\b",
    'q"uote',
    "\x7f",
    "a\u2028b",
]


# A tiny JSON model that can say what real JSON libraries cannot: repeated keys, raw number tokens, escapes.
@dataclass
class Obj:
    pairs: list[tuple[Any, Any]]  # key: str, or Esc for an escaped spelling


@dataclass
class Num:
    token: str


@dataclass
class Esc:
    text: str  # every character written as a \\uXXXX escape


@dataclass
class Raw:
    text: str  # written verbatim (lone surrogate escapes, invalid tokens)


def dump(node: Any, out: list[str]) -> None:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, str) and item.startswith("\x00\x00"):  # a structural token pushed below
            out.append(item[2:])
        elif isinstance(item, Obj):
            parts: list[Any] = ["\x00\x00}"]
            for i, (key, value) in enumerate(reversed(item.pairs)):
                parts.append(value)
                parts.append("\x00\x00:")
                parts.append(key if isinstance(key, (Esc, Raw)) else ("\x00\x00" + _string(key)))
                if i < len(item.pairs) - 1:
                    parts.append("\x00\x00,")
            out.append("{")
            stack.extend(parts)
        elif isinstance(item, list):
            parts = ["\x00\x00]"]
            for i, value in enumerate(reversed(item)):
                parts.append(value)
                if i < len(item) - 1:
                    parts.append("\x00\x00,")
            out.append("[")
            stack.extend(parts)
        elif isinstance(item, Num):
            out.append(item.token)
        elif isinstance(item, Esc):
            out.append('"' + "".join(_u16(c) for c in item.text) + '"')
        elif isinstance(item, Raw):
            out.append(item.text)
        elif isinstance(item, str):
            out.append(_string(item))
        elif item is None:
            out.append("null")
        elif item is True or item is False:
            out.append("true" if item else "false")
        else:
            out.append(str(item))


def _string(text: str) -> str:
    out = ['"']
    for c in text:
        if c == '"' or c == "\\":
            out.append("\\" + c)
        elif ord(c) < 0x20:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def _u16(c: str) -> str:
    b = c.encode("utf-16-be")
    return "".join(f"\\u{int.from_bytes(b[i : i + 2], 'big'):04x}" for i in range(0, len(b), 2))


def encode(node: Any) -> bytes:
    out: list[str] = []
    dump(node, out)
    return "".join(out).encode("utf-8")


@dataclass
class Case:
    header: bytes
    data_len: int
    length_field: int | None = None  # None: the true header length
    tail: bytes = b""  # raw bytes appended after the data region

    def file_bytes(self) -> bytes:
        n = len(self.header) if self.length_field is None else self.length_field
        return struct.pack("<Q", n & (2**64 - 1)) + self.header + b"\x00" * self.data_len + self.tail


def _nbytes(dtype: str, shape: list[int]) -> int:
    numel = 1
    for d in shape:
        numel *= d
    return numel * BITS.get(dtype, 8) // 8


def _shape(rng: random.Random, dtype: str) -> list[int]:
    rank = rng.choice([0, 1, 1, 2, 2, 2, 3])
    shape = [rng.choice([1, 2, 3, 4, 8, 16]) for _ in range(rank)]
    if BITS.get(dtype, 8) < 8 and _nbytes(dtype, shape) * 8 != _numel(shape) * BITS[dtype]:
        shape = [*shape, 8] if shape else [8]
    return shape


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _deep(depth: int, leaf: Any) -> Any:
    node = leaf
    for i in range(depth):
        node = [node] if i % 2 else Obj([("k", node)])
    return node


def generate(rng: random.Random) -> Case:
    """One header: a valid layout first, then 0-4 mutations."""
    count = rng.choice([0, 1, 1, 2, 3, 5, 8])
    entries: list[tuple[Any, Any]] = []
    offset = 0
    names = set()
    for i in range(count):
        name = rng.choice(NAMES) + str(i) if rng.random() < 0.5 else f"t{i}"
        while name in names:
            name += "_"
        names.add(name)
        dtype = rng.choice(DTYPES)
        shape = _shape(rng, dtype)
        n = _nbytes(dtype, shape)
        entries.append(
            (
                name,
                Obj(
                    [
                        ("dtype", dtype),
                        ("shape", [Num(str(d)) for d in shape]),
                        ("data_offsets", [Num(str(offset)), Num(str(offset + n))]),
                    ]
                ),
            )
        )
        offset += n
    rng.shuffle(entries)
    top: list[tuple[Any, Any]] = list(entries)
    if rng.random() < 0.5:
        meta = Obj([("format", "pt")] + [(rng.choice(NAMES), rng.choice(NAMES)) for _ in range(rng.randrange(3))])
        top.insert(rng.randrange(len(top) + 1), ("__metadata__", meta))
    case = Case(b"", offset)
    for _ in range(rng.choice([0, 1, 1, 2, 2, 3, 4])):
        rng.choice(MUTATIONS)(rng, top, case)
    header = encode(Obj(top))
    if rng.random() < 0.08:
        header = rng.choice([b" ", b"\n\t ", b"\r"]) + header + rng.choice([b" " * 7, b"\n", b"\x00", b"x", b""])
    if rng.random() < 0.05:
        header = _flip(rng, header)
    case.header = header
    return case


def _tensor(top: list[tuple[Any, Any]], rng: random.Random) -> tuple[int, Obj] | None:
    found = [(i, v) for i, (k, v) in enumerate(top) if isinstance(v, Obj) and k != "__metadata__"]
    return rng.choice(found) if found else None


def _field(entry: Obj, name: str) -> int | None:
    for i, (k, _) in enumerate(entry.pairs):
        if k == name:
            return i
    return None


def m_dup_field(rng, top, case):
    hit = _tensor(top, rng)
    if hit and hit[1].pairs:
        entry = hit[1]
        k, v = rng.choice(entry.pairs)
        key = Esc(k) if isinstance(k, str) and rng.random() < 0.3 else k
        entry.pairs.insert(rng.randrange(len(entry.pairs) + 1), (key, v if rng.random() < 0.6 else "F16"))


def m_dup_name(rng, top, case):
    hit = _tensor(top, rng)
    if hit:
        name = top[hit[0]][0]
        copy = Obj(list(hit[1].pairs))
        if copy.pairs and rng.random() < 0.4:
            copy.pairs[0] = ("dtype", rng.choice(["XX", "F32"]))
        top.insert(
            rng.randrange(len(top) + 1), (Esc(name) if isinstance(name, str) and rng.random() < 0.2 else name, copy)
        )


def m_dup_metadata(rng, top, case):
    value = rng.choice([None, Obj([]), Obj([("k", "v")]), Obj([("k", "v"), ("k", "w")]), Obj([("k", Num("1"))])])
    key = Esc("__metadata__") if rng.random() < 0.2 else "__metadata__"
    top.insert(rng.randrange(len(top) + 1), (key, value))


def m_metadata_value(rng, top, case):
    value = rng.choice(
        [
            Num("1"),
            None,
            ["a"],
            Obj([("k", Num("1"))]),
            Obj([("k", "1"), ("k", Num("2"))]),
            Obj([("k", Raw('"\\ud800"'))]),
            "str",
            Obj([("k", Esc("v\u00e9"))]),
        ]
    )
    top.insert(rng.randrange(len(top) + 1), ("__metadata__", value))


def m_dtype(rng, top, case):
    hit = _tensor(top, rng)
    at = _field(hit[1], "dtype") if hit else None
    if at is not None:
        old = hit[1].pairs[at][1]
        variant = old if isinstance(old, str) else "F32"
        hit[1].pairs[at] = (
            "dtype",
            rng.choice(
                [
                    Obj([(variant, None)]),
                    Obj([(variant, Obj([]))]),
                    Obj([(variant, None), (variant, None)]),
                    Obj([(variant, Num("1"))]),
                    Obj([]),
                    [variant],
                    Num("5"),
                    variant.lower(),
                    "Q7",
                    None,
                    Esc(variant),
                    Obj([(Esc(variant), None)]),
                    variant + " ",
                ]
            ),
        )


def m_number(rng, top, case):
    hit = _tensor(top, rng)
    if not hit:
        return
    entry = hit[1]
    where = rng.choice(["shape", "data_offsets", "extra"])
    token = Num(rng.choice(NUMBERS))
    at = _field(entry, where)
    if where == "extra" or at is None:
        entry.pairs.insert(rng.randrange(len(entry.pairs) + 1), (rng.choice(["x", "extra", "dtypes"]), token))
    else:
        values = entry.pairs[at][1]
        if isinstance(values, list) and values:
            values[rng.randrange(len(values))] = token
        elif isinstance(values, list):
            values.append(token)


def m_zero_offset_negzero(rng, top, case):
    for _, v in top:
        if isinstance(v, Obj):
            at = _field(v, "data_offsets")
            if (
                at is not None
                and isinstance(v.pairs[at][1], list)
                and v.pairs[at][1]
                and getattr(v.pairs[at][1][0], "token", None) == "0"
            ):
                v.pairs[at][1][0] = Num("-0")
                return


def m_overflow_shape(rng, top, case):
    hit = _tensor(top, rng)
    at = _field(hit[1], "shape") if hit else None
    if at is not None:
        shape = rng.choice(
            [
                ["4294967296", "4294967296", "0"],
                ["0", "4294967296", "4294967296"],
                ["18446744073709551615", "0"],
                ["18446744073709551615", "2", "0"],
                ["4611686018427387904"],
                ["2305843009213693952"],
                ["4294967296", "4294967295"],
                ["3", "6148914691236517205"],
                ["1"] * 80_000,
                ["2"] * 80_000,
                ["2"] * 70 + ["0"],
                ["0"] + ["2"] * 70,
            ]
        )
        hit[1].pairs[at] = ("shape", [Num(t) for t in shape])
        data_at = _field(hit[1], "data_offsets")
        if data_at is not None and rng.random() < 0.5:
            hit[1].pairs[data_at] = ("data_offsets", [Num("0"), Num("0")])


def m_offsets(rng, top, case):
    hit = _tensor(top, rng)
    at = _field(hit[1], "data_offsets") if hit else None
    if at is not None:
        old = hit[1].pairs[at][1]
        old = old if isinstance(old, list) and old else [Num("0"), Num("4")]
        hit[1].pairs[at] = (
            "data_offsets",
            rng.choice(
                [
                    old[:1],
                    [*old, Num("4")],
                    list(reversed(old)),
                    [Num("0"), Num("1")],
                    Obj([("0", Num("0"))]),
                    "0,4",
                    [old[0], Num("18446744073709551615")],
                    [Num("1.0"), Num("4")],
                ]
            ),
        )


def m_array_entry(rng, top, case):
    hit = _tensor(top, rng)
    if hit:
        values = [v for _, v in hit[1].pairs]
        choice = rng.random()
        if choice < 0.15:
            values = values[:2]
        elif choice < 0.3:
            values = [*values, Num("1")]
        elif choice < 0.4:
            values = list(reversed(values))
        top[hit[0]] = (top[hit[0]][0], values)


def m_entry_kind(rng, top, case):
    if top:
        i = rng.randrange(len(top))
        top[i] = (top[i][0], rng.choice([None, Num("1"), "F32", True, [], Obj([])]))


def m_extra_field(rng, top, case):
    hit = _tensor(top, rng)
    if hit:
        value = rng.choice(
            [
                Obj([("a", Num("1")), ("a", Num("2"))]),
                ["x", Num("-0"), None, True],
                Raw('"\\ud800"'),
                Raw('"\\ud83d\\ude00"'),
                Raw('"\\udc00\\ud800"'),
                "\u00e9\U0001f600",
                Esc("dtype"),
                Num(rng.choice(NUMBERS)),
                Raw("NaN"),
                Raw("01"),
                Raw("1."),
                Raw("-"),
            ]
        )
        hit[1].pairs.insert(rng.randrange(len(hit[1].pairs) + 1), (rng.choice(["x", "y", Esc("z")]), value))


def m_nesting(rng, top, case):
    depth = rng.choice([120, 124, 125, 126, 127, 128, 129, 130, 200, 1000, 1030, 5000])
    hit = _tensor(top, rng)
    if hit and rng.random() < 0.8:
        hit[1].pairs.append(("deep", _deep(depth - 2, Num("1"))))  # the entry and the header add two levels
    else:
        top.append(("__metadata__" if rng.random() < 0.2 else "deep", _deep(depth - 1, "x")))


def m_deep_field(rng, top, case):
    """`shape` or `data_offsets` itself nested: inside serde's 128 levels, at orjson's encoding limit (254) and past
    orjson's parsing limit (1,024); issue 27 item 7 (orjson.dumps raised TypeError on these)."""
    hit = _tensor(top, rng)
    field = rng.choice(["shape", "data_offsets"])
    at = _field(hit[1], field) if hit else None
    if at is not None:
        depth = rng.choice([2, 3, 126, 127, 128, 200, 253, 254, 255, 300, 1000, 1020, 1030])
        node: Any = Num(rng.choice(["0", "1", "4"])) if rng.random() < 0.5 else []
        for _ in range(depth):
            node = [node]
        hit[1].pairs[at] = (field, node if rng.random() < 0.5 else [Num("0"), node])


def m_big_dims(rng, top, case):
    """Long dimension lists of big integers, with or without a zero (first, last or inside): issue 27 item 6
    (math.prod of 80,000 u64-max values before the overflow test took 37 s)."""
    hit = _tensor(top, rng)
    at = _field(hit[1], "shape") if hit else None
    if at is not None:
        n = rng.choice([3, 65, 100, 1000, 20_000, 80_000])
        big = rng.choice(["18446744073709551615", "4294967296", "9223372036854775807", "65536"])
        dims = [big] * n
        where = rng.choice([None, 0, 1, n // 2, n])
        if where is not None:
            dims.insert(where, "0")
        hit[1].pairs[at] = ("shape", [Num(t) for t in dims])
        data_at = _field(hit[1], "data_offsets")
        if data_at is not None and rng.random() < 0.7:
            hit[1].pairs[data_at] = ("data_offsets", [Num("0"), Num("0")])


def m_missing_field(rng, top, case):
    hit = _tensor(top, rng)
    if hit and hit[1].pairs:
        del hit[1].pairs[rng.randrange(len(hit[1].pairs))]


def m_rename(rng, top, case):
    if top:
        i = rng.randrange(len(top))
        name = rng.choice([*NAMES, "x" * 5000, "\x00", Raw('"\\ud800"'), Esc("a:b"), Raw('"a\\u003ab"')])
        top[i] = (name, top[i][1])


def m_data_len(rng, top, case):
    case.data_len = max(0, case.data_len + rng.choice([-8, -1, 1, 3, 4096]))


def m_length_field(rng, top, case):
    case.length_field = rng.choice([0, 1, 7, 100_000_001, 2**63, 2**64 - 1, -1])
    if case.length_field == -1:
        case.length_field = None
        case.tail = b"x"


def m_empty_top(rng, top, case):
    if rng.random() < 0.5:
        top.clear()
        case.data_len = 0


MUTATIONS = [
    m_dup_field,
    m_dup_field,
    m_dup_name,
    m_dup_metadata,
    m_metadata_value,
    m_dtype,
    m_dtype,
    m_number,
    m_number,
    m_number,
    m_zero_offset_negzero,
    m_overflow_shape,
    m_offsets,
    m_array_entry,
    m_array_entry,
    m_entry_kind,
    m_extra_field,
    m_extra_field,
    m_nesting,
    m_deep_field,
    m_big_dims,
    m_missing_field,
    m_rename,
    m_data_len,
    m_length_field,
    m_empty_top,
]


def _flip(rng: random.Random, header: bytes) -> bytes:
    if not header:
        return header
    b = bytearray(header)
    i = rng.randrange(len(b))
    op = rng.random()
    if op < 0.4:
        b[i] = rng.choice(b'{}[]",:0-9 \\\x00\xff\xc3e.')
    elif op < 0.7:
        del b[i]
    else:
        b.insert(i, rng.choice(b'{}[]",:-0 \\\xe9'))
    return bytes(b)


def reader_verdict(path: str) -> tuple[bool, frozenset[str]]:
    from safetensors import safe_open

    try:
        with safe_open(path, "np") as fh:
            return True, frozenset(fh.keys())
    except Exception:  # noqa: BLE001 - the oracle: any error the reference reader raises is a rejection
        return False, frozenset()


def ours_verdict(folder: str, name: str) -> tuple[bool, frozenset[str]]:
    from ckpt_tools.read.header import read_shard
    from ckpt_tools.read.local import LocalSource

    result = read_shard(LocalSource(Path(folder)), name)
    if result.shard is None or not result.shard.valid:
        return False, frozenset()
    return True, frozenset(t.name for t in result.shard.tensors)


@dataclass
class Summary:
    cases: int = 0
    disagreements: int = 0
    exceptions: int = 0
    ours_max_s: float = 0.0
    reader_max_s: float = 0.0
    slowest: str = ""
    first: list[str] | None = None


def run(cases: int, seed: int, folder: str, stop_after: int = 5) -> Summary:
    summary = Summary(first=[])
    name = "model.safetensors"
    path = os.path.join(folder, name)
    with open(path, "wb") as fh:  # import both sides before timing anything
        fh.write(Case(b"{}", 0).file_bytes())
    reader_verdict(path), ours_verdict(folder, name)
    for i in range(cases):
        rng = random.Random(f"{seed}:{i}")
        case = generate(rng)
        with open(path, "wb") as fh:
            fh.write(case.file_bytes())
        t0 = time.perf_counter()
        expected = reader_verdict(path)
        t1 = time.perf_counter()
        try:
            got = ours_verdict(folder, name)
        except Exception as exc:  # noqa: BLE001 - an exception is exactly what this harness looks for
            summary.exceptions += 1
            got = None
            summary.first.append(f"case {seed}:{i}: exception {type(exc).__name__}: {str(exc)[:200]}")
        t2 = time.perf_counter()
        summary.cases += 1
        summary.reader_max_s = max(summary.reader_max_s, t1 - t0)
        if t2 - t1 > summary.ours_max_s:
            summary.ours_max_s = t2 - t1
            summary.slowest = f"{seed}:{i} ({len(case.header):,} header bytes)"
        if got is not None and got != expected:
            summary.disagreements += 1
            summary.first.append(
                f"case {seed}:{i}: reader {expected[0]} {sorted(expected[1])[:5]}, ckpt {got[0]} "
                f"{sorted(got[1])[:5]}; header {case.header[:300]!r}"
            )
        if len(summary.first) >= stop_after:
            break
    return summary


BIG_SHAPES = {
    "80k-dims-of-2": lambda: _big_shape(["2"] * 80_000),
    "80k-dims-of-1": lambda: _big_shape(["1"] * 80_000),
    "shape-of-10M-ones": lambda: _big_shape(["1"] * 10_000_000),
    "100MB-digit-integer": lambda: b'{"a":{"dtype":"U8","shape":[' + b"1" * 99_999_000 + b'],"data_offsets":[0,0]}}',
    "100MB-nesting": lambda: b"[" * 50_000_000 + b"]" * 50_000_000,
    "100MB-nesting-in-entry": lambda: (
        b'{"a":{"dtype":"U8","shape":[],"data_offsets":[0,1],"x":' + b"[" * 49_999_000 + b"]" * 49_999_000 + b"}}"
    ),
    "1M-duplicate-fields": lambda: b'{"a":{' + b'"dtype":"U8",' * 1_000_000 + b'"shape":[],"data_offsets":[0,1]}}',
    "1M-duplicate-names": lambda: (
        b"{"
        + b'"a":{"dtype":"U8","shape":[],"data_offsets":[0,1]},' * 1_000_000
        + b'"b":{"dtype":"U8","shape":[],"data_offsets":[1,2]}}'
    ),
    "100MB-zero-fraction": lambda: (
        b'{"a":{"dtype":"U8","shape":[],"data_offsets":[0,1],"x":0.' + b"0" * 99_999_000 + b"1}}"
    ),
    "100MB-small-ints-exact": lambda: (
        b'{"a":{"dtype":"U8","shape":[],"data_offsets":[0,1],"x":[-0,' + b"2," * 49_999_000 + b'18446744073709551616]}}'
    ),
    "100MB-name": lambda: b'{"' + b"n" * 99_999_000 + b'":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}',
    "escaped-800k-tensors": lambda: _many_tensors(800_000, escaped=True),
}


def _big_shape(dims: list[str]) -> bytes:
    return b'{"a":{"dtype":"U8","shape":[' + ",".join(dims).encode() + b'],"data_offsets":[0,1]}}'


def _many_tensors(count: int, escaped: bool) -> bytes:
    key = "t\\u0061" if escaped else "ta"
    parts = [f'"{key}{i}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{i + 1}]}}' for i in range(count)]
    return ("{" + ",".join(parts) + "}").encode()


def big_one(label: str, folder: str) -> None:
    """Child process: judge one big hostile header, print `label ours reader seconds peak-MiB`."""
    header = BIG_SHAPES[label]()
    path = os.path.join(folder, "model.safetensors")
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(header)) + header + b"\x00")
    del header
    t0 = time.perf_counter()
    ours = ours_verdict(folder, "model.safetensors")
    seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    expected = reader_verdict(path)
    reader_seconds = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    agree = "agree" if ours == expected else "DISAGREE"
    print(
        f"{label:24} {os.path.getsize(path) / 1e6:7.1f} MB  ckpt {seconds:6.2f} s  reader {reader_seconds:6.2f} s  "
        f"peak RSS {rss:6.0f} MiB  {agree} (valid={ours[0]})"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--big", action="store_true", help="run the 100 MB hostile headers instead")
    ap.add_argument("--big-one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ckpt-fuzz-") as folder:
        if args.big_one:
            big_one(args.big_one, folder)
            return 0
        if args.big:
            for label in BIG_SHAPES:
                subprocess.run([sys.executable, __file__, "--big-one", label], check=True)
            return 0
        start = time.perf_counter()
        s = run(args.cases, args.seed, folder)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"cases {s.cases:,}  disagreements {s.disagreements}  exceptions {s.exceptions}  "
        f"({time.perf_counter() - start:.0f} s)"
    )
    print(
        f"slowest case: ckpt {s.ours_max_s * 1000:.1f} ms (case {s.slowest}), reader {s.reader_max_s * 1000:.1f} ms; "
        f"peak RSS {rss:.0f} MiB"
    )
    for line in s.first or []:
        print(line)
    return 1 if s.disagreements or s.exceptions else 0


if __name__ == "__main__":
    sys.exit(main())
