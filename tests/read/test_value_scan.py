"""The streaming value scan: exact statistics whatever the chunking, every code class of every scanned dtype, reads
bounded by the chunk size, the pipeline reading only what the rules that run ask for."""

from __future__ import annotations

import math
import random
import re
import struct
from collections.abc import Sequence
from pathlib import Path

import pytest

from ckpt_tools.dtypes import NAN_BYTES
from ckpt_tools.model.values import (
    FLOAT8_DTYPES,
    SMALL_TENSOR_ELEMENTS,
    STATS_DTYPES,
    TensorStats,
    ValueStats,
    decode_code,
    float8_table,
)
from ckpt_tools.pipeline import analyze, value_rules, wanted_values
from ckpt_tools.read import open_source, residency
from ckpt_tools.read.loader import load_checkpoint
from ckpt_tools.read.local import LocalSource
from ckpt_tools.read.value_scan import ScanCounters, plan_shard, read_pieces, scan_values
from ckpt_tools.rules.base import Rule, all_rules
from ckpt_tools.write.header import build_file
from tests.corrupt import GENUINE, copy_fixture, patch_tensor_bytes

# ---- an independent reference: bit fields read by hand, per format ------------------------------------------------

# (exponent bits, mantissa bits, bias) and how the top exponent and 0x80 behave
FORMATS = {
    "F8_E4M3": (4, 3, 7),
    "F8_E4M3FNUZ": (4, 3, 8),
    "F8_E5M2": (5, 2, 15),
    "F8_E5M2FNUZ": (5, 2, 16),
}


def reference_class(dtype: str, code: int) -> str:
    """'nan' / 'inf' / 'zero' / 'neg' / 'sub' / 'negsub' / 'plain', from the format definitions."""
    if dtype == "F8_E8M0":
        return "nan" if code == 0xFF else "plain"
    ebits, mbits, _ = FORMATS[dtype]
    sign, exp, man = code >> 7, (code >> mbits) & ((1 << ebits) - 1), code & ((1 << mbits) - 1)
    if dtype.endswith("FNUZ"):
        if code == 0x80:
            return "nan"
    elif dtype == "F8_E4M3":
        if exp == 15 and man == 7:
            return "nan"
    elif exp == 31:  # E5M2
        return "inf" if man == 0 else "nan"
    if exp == 0 and man == 0:
        return "zero"
    if exp == 0:
        return "negsub" if sign else "sub"
    return "neg" if sign else "plain"


def reference_stats(dtype: str, blob: bytes) -> dict[str, int]:
    out = {"count": 0, "nan": 0, "inf": 0, "zero": 0, "negative": 0, "subnormal": 0}
    if dtype in FLOAT8_DTYPES:
        for b in blob:
            c = reference_class(dtype, b)
            out["count"] += 1
            out["nan"] += c == "nan"
            out["inf"] += c == "inf"
            out["zero"] += c == "zero"
            out["negative"] += c in ("neg", "negsub")
            out["subnormal"] += c in ("sub", "negsub")
        return out
    tiny = {"F32": 2.0**-126, "BF16": 2.0**-126, "F16": 2.0**-14}[dtype]
    for v in wide_values(dtype, blob):
        out["count"] += 1
        out["nan"] += math.isnan(v)
        out["inf"] += math.isinf(v)
        out["zero"] += v == 0
        out["negative"] += math.isfinite(v) and v < 0
        out["subnormal"] += math.isfinite(v) and v != 0 and abs(v) < tiny
    return out


def wide_values(dtype: str, blob: bytes) -> list[float]:
    if dtype == "F32":
        return [v for (v,) in struct.iter_unpack("<f", blob)]
    if dtype == "F16":
        return [v for (v,) in struct.iter_unpack("<e", blob)]
    return [struct.unpack("<f", b"\x00\x00" + blob[i : i + 2])[0] for i in range(0, len(blob), 2)]


def wide_bytes(dtype: str, values: Sequence[float]) -> bytes:
    if dtype == "F32":
        return struct.pack(f"<{len(values)}f", *values)
    if dtype == "F16":
        return struct.pack(f"<{len(values)}e", *values)
    return b"".join(struct.pack("<f", v)[2:] for v in values)


def assert_matches(stats: TensorStats, dtype: str, blob: bytes) -> None:
    ref = reference_stats(dtype, blob)
    got = {k: getattr(stats, k) for k in ref}
    assert got == ref, dtype
    if dtype not in FLOAT8_DTYPES or stats.values is not None:
        finite = [
            v
            for v in (wide_values(dtype, blob) if dtype not in FLOAT8_DTYPES else [decode_code(dtype, b) for b in blob])
            if math.isfinite(v)
        ]
        assert (stats.min, stats.max) == ((min(finite), max(finite)) if finite else (None, None))


# ---- crafted tensors ------------------------------------------------------------------------------------------------

SPECIAL_WIDE = [
    math.nan,
    -math.nan,
    math.inf,
    -math.inf,
    0.0,
    -0.0,
    1e-40,
    -1e-40,
    1e-7,
    -2.5,
    3.0,
    448.0,
    6e-5,
    -6e-8,
    65504.0,
]


def crafted(dtype: str, rng: random.Random) -> list[tuple[str, str, list[int], bytes]]:
    """A big tensor holding every special code (or value) among normal ones, a small one, and an empty one."""
    if dtype in FLOAT8_DTYPES:
        codes = list(range(256)) * 3 + [rng.choice(float8_table(dtype).plain) for _ in range(3000)]
        rng.shuffle(codes)
        big, small = bytes(codes), bytes([0x38, 0x7F, 0x00, 0x81])
    else:
        vals = SPECIAL_WIDE * 20 + [rng.uniform(-1, 1) * 10 ** rng.randint(-4, 2) for _ in range(700)]
        rng.shuffle(vals)
        big, small = wide_bytes(dtype, vals), wide_bytes(dtype, [0.5, -0.0, math.inf])
    size = 1 if dtype in FLOAT8_DTYPES else len(wide_bytes(dtype, [0.0]))
    return [
        ("a.weight_scale", dtype, [len(big) // size], big),
        ("a.input_scale", dtype, [len(small) // size], small),
        ("a.k_scale", dtype, [0], b""),
        ("b.weight_scale", dtype, [len(big) // size], big[::-1]),
    ]


def write_shard(folder: Path, name: str, tensors: list[tuple[str, str, list[int], bytes]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(build_file(tensors))
    return path


@pytest.mark.parametrize("dtype", sorted(STATS_DTYPES))
def test_stats_are_exact_whatever_the_chunking(dtype: str, tmp_path: Path) -> None:
    tensors = crafted(dtype, random.Random(dtype))
    write_shard(tmp_path, "model.safetensors", tensors)
    source = LocalSource(tmp_path)
    ckpt = load_checkpoint(source)
    shards = {s.name: s for s in ckpt.shards}
    blobs = {name: data for name, _d, _s, data in tensors}
    for chunk in (1, 3, 4, 6, 64, 1000, 1 << 20):  # forcing tensors to straddle reads at every offset parity
        counters = ScanCounters()
        result = scan_values(source, list(ckpt.tensors.values()), shards, chunk=chunk, counters=counters)
        assert set(result) == set(blobs)
        for name, blob in blobs.items():
            assert_matches(result.get(name), dtype, blob)
        item = 1 if dtype in FLOAT8_DTYPES else len(wide_bytes(dtype, [0.0]))
        assert counters.largest_read <= max(chunk - chunk % item, item)
        assert counters.bytes_read == sum(len(b) for b in blobs.values())  # adjacent tensors: nothing else read
    small = result.get("a.input_scale")
    assert small.values is not None and len(small.values) <= SMALL_TENSOR_ELEMENTS
    assert result.get("a.weight_scale").values is None
    assert result.get("a.k_scale") == TensorStats(dtype, 0, values=())


def test_class_tables_follow_the_format_definitions() -> None:
    for dtype in FLOAT8_DTYPES:
        table = float8_table(dtype)
        names = ["plain", "nan", "inf", "zero", "neg", "sub", "negsub"]
        assert [names[table.classes[c]] for c in range(256)] == [reference_class(dtype, c) for c in range(256)]
    for dtype, nan in NAN_BYTES.items():  # the one NaN table the repairs use agrees
        assert {c for c in range(256) if math.isnan(decode_code(dtype, c))} == set(nan)
    assert decode_code("F8_E4M3", 0x7E) == 448 and decode_code("F8_E4M3", 0x01) == 2.0**-9
    assert decode_code("F8_E5M2", 0x7B) == 57344 and decode_code("F8_E5M2", 0x7C) == math.inf
    assert decode_code("F8_E4M3FNUZ", 0x7F) == 240 and decode_code("F8_E8M0", 0x7F) == 1.0


def test_all_zero_and_clean_pieces_take_the_fast_paths_exactly(tmp_path: Path) -> None:
    zeros = bytes(5000)
    clean = bytes([0x30 + i % 0x40 for i in range(5000)])  # positive normal E4M3 codes only
    write_shard(
        tmp_path,
        "model.safetensors",
        [
            ("z.weight_scale", "F8_E4M3", [5000], zeros),
            ("c.weight_scale", "F8_E4M3", [5000], clean),
            ("f.weight_scale", "F32", [1250], zeros),
        ],
    )
    ckpt = load_checkpoint(LocalSource(tmp_path))
    result = scan_values(
        LocalSource(tmp_path), list(ckpt.tensors.values()), {s.name: s for s in ckpt.shards}, chunk=1024
    )
    assert result.get("z.weight_scale").zero == 5000
    assert_matches(result.get("c.weight_scale"), "F8_E4M3", clean)
    assert result.get("f.weight_scale").zero == 1250 and result.get("f.weight_scale").min == 0.0


@pytest.mark.parametrize("dtype", sorted(STATS_DTYPES))
def test_runs_of_block_scales_measured_a_read_at_a_time_are_exact(dtype: str, tmp_path: Path) -> None:
    """Block scales side by side, as the safetensors writer groups them: a read made only of them is judged whole
    (one min/max pass), a clean one gives every tensor in it the shared clean result. Some tensors hold one special
    code or value, one a zero row; every chunk size puts tensor edges inside reads and tensors across reads."""
    rng = random.Random(f"runs-{dtype}")
    rows, width = 8, 16
    if dtype in FLOAT8_DTYPES:
        table = float8_table(dtype)
        specials = [c for c in range(256) if c not in table.plain]

        def plain() -> bytes:
            return bytes(rng.choice(table.plain) for _ in range(rows * width))

        def with_special(blob: bytes) -> bytes:
            at = rng.randrange(len(blob))
            return blob[:at] + bytes([rng.choice(specials)]) + blob[at + 1 :]

        zero = bytes([c for c in range(256) if table.classes[c] == 3][:1])  # a zero code (E8M0 has none)
        size = 1
    else:
        size = len(wide_bytes(dtype, [0.0]))

        def plain() -> bytes:
            return wide_bytes(dtype, [rng.choice((-1, 1)) * rng.uniform(0.01, 100) for _ in range(rows * width)])

        def with_special(blob: bytes) -> bytes:
            at = rng.randrange(len(blob) // size) * size
            special = wide_bytes(dtype, [rng.choice([math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-40, 6e-8])])
            return blob[:at] + special + blob[at + size :]

        zero = wide_bytes(dtype, [0.0])
    blobs = [plain() for _ in range(12)]
    for i in (3, 7, 10):
        blobs[i] = with_special(blobs[i])
    row = 2 * width * size
    if zero:
        blobs[5] = blobs[5][:row] + zero * width + blobs[5][row + width * size :]  # row 2 all zero
    blobs += [bytes(rows * width * size)] * 3  # all-zero tensors side by side: reads of zero bytes only
    tensors = [(f"m{i}.weight_scale", dtype, [rows, width], b) for i, b in enumerate(blobs)]
    write_shard(tmp_path, "model.safetensors", tensors)
    source = LocalSource(tmp_path)
    ckpt = load_checkpoint(source)
    for chunk in (1, 7, 100, rows * width * size, 300, 1 << 20):
        result = scan_values(source, list(ckpt.tensors.values()), {s.name: s for s in ckpt.shards}, chunk=chunk)
        for name, _d, _s, blob in tensors:
            stats = result.get(name)
            assert_matches(stats, dtype, blob)
            zero_rows = [
                r
                for r in range(rows)
                if all(v == 0 for v in reference_values(dtype, blob[r * width * size : (r + 1) * width * size]))
            ]
            assert (stats.channels, stats.zero_rows, stats.first_zero_row) == (
                rows,
                len(zero_rows),
                zero_rows[0] if zero_rows else None,
            ), (name, chunk)
        assert result.get("m5.weight_scale").zero_rows == (1 if zero else 0)


def reference_values(dtype: str, blob: bytes) -> list[float]:
    return [decode_code(dtype, b) for b in blob] if dtype in FLOAT8_DTYPES else wide_values(dtype, blob)


# ---- corrupted genuine fixtures -------------------------------------------------------------------------------------

BLOCK = "model.layers.1.mlp.up_proj.weight_scale"


def test_every_class_on_a_corrupted_genuine_block_scale(tmp_path: Path) -> None:
    folder = copy_fixture("modelopt-llama-nvfp4", tmp_path / "m")
    before = analyze(str(folder)).checkpoint.values.get(BLOCK)
    assert before.dtype == "F8_E4M3" and before.nan == 0 and before.negative == 0
    patch_tensor_bytes(folder, BLOCK, {0: 0x7F, 1: 0xFF, 2: 0x00, 3: 0x80, 4: 0x03, 5: 0x83, 6: 0xB8})
    after = analyze(str(folder)).checkpoint.values.get(BLOCK)
    # The seven patched bytes replaced positive normal codes (genuine block scales are positive normals).
    assert after.nan == before.nan + 2
    assert after.zero == before.zero + 2
    assert after.negative == before.negative + 2  # 0x83 (negative subnormal) and 0xB8; -0 is a zero
    assert after.subnormal == before.subnormal + 2
    assert after.count == before.count


def test_genuine_scalars_keep_their_values() -> None:
    values = analyze(str(GENUINE / "modelopt-llama-nvfp4")).checkpoint.values
    s = values.get("model.layers.0.mlp.down_proj.weight_scale_2")
    assert s.dtype == "F32" and s.count == 1 and s.scalar is not None and s.min == s.max == s.scalar


# ---- what is read ---------------------------------------------------------------------------------------------------


def test_pipeline_scans_the_union_of_what_the_rules_ask_for() -> None:
    ckpt = analyze(str(GENUINE / "llmc-llama-fp8-dynamic-fp8kv")).checkpoint
    rules = [r for r in all_rules() if r.needs_values]
    expected = {t.name for t in ckpt.tensors.values() if any(r.wants_values(t) for r in rules)}
    assert set(ckpt.values) == expected and expected
    assert not any(ckpt.tensors[n].name.endswith(".weight") for n in ckpt.values)
    assert "model.layers.0.self_attn.k_scale" in ckpt.values


def test_every_value_rule_declares_what_it_reads() -> None:
    for rule in all_rules():
        overrides = rule.wants_values.__func__ is not Rule.wants_values.__func__
        assert overrides == rule.needs_values, rule.code


@pytest.mark.parametrize("name", sorted(p.name for p in GENUINE.iterdir() if p.is_dir()))
def test_what_a_rule_reads_depends_on_dtype_shape_and_suffix_only(name: str) -> None:
    # The pipeline asks `wants_values` once per (dtype, shape, suffix): the same tensor under another module path, in
    # another shard, at other offsets must get the same answer from every rule.
    ckpt = load_checkpoint(open_source(str(GENUINE / name)))
    rules = [r for r in all_rules() if r.needs_values]
    for t in ckpt.tensors.values():
        moved = t._replace(name="x.layers.99.y." + t.name.rpartition(".")[2], shard="other.safetensors", begin=8)
        moved = moved._replace(end=moved.begin + t.nbytes)
        assert [r.wants_values(moved) for r in rules] == [r.wants_values(t) for r in rules], (name, t.name)


def test_a_rule_suppressed_outright_is_not_read(tmp_path: Path) -> None:
    folder = copy_fixture("modelopt-llama-nvfp4", tmp_path / "m")
    patch_tensor_bytes(folder, BLOCK, {0: 0x7F})
    full = analyze(str(folder))
    assert [f.code for f in full.report.findings if f.severity != "info"] == ["CK501"]
    # zero-scale-row (CK504) reads the same 8-bit block scales: both must go for those bytes to stay unread.
    (folder / ".ckpt.toml").write_text(
        'ignore = [{rule = "CK501", reason = "scrubbed downstream"}, {rule = "CK504", reason = "checked upstream"}]\n'
    )
    quiet = analyze(str(folder))
    assert not [f for f in quiet.report.findings if f.severity != "info"]
    assert [s["code"] for s in quiet.report.skipped] == ["CK501", "CK504"]
    assert "scrubbed downstream" in quiet.report.skipped[0]["reason"]
    scanned = {quiet.checkpoint.tensors[n].dtype for n in quiet.checkpoint.values}
    assert scanned == {"F32"}  # the 8-bit block scales (CK501's, CK504's) were not read; the global scales were
    run, silenced = value_rules(())
    assert not silenced and wanted_values(run)(quiet.checkpoint.tensors[BLOCK])


class RecordingSource:
    """A source seen only through the `Source` protocol (no local path): the Hub's path through the scan."""

    is_remote = True

    def __init__(self, inner: LocalSource) -> None:
        self.inner = inner
        self.calls: list[list[tuple[int, int]]] = []
        self.label = inner.label

    def list_files(self):
        return self.inner.list_files()

    def size(self, name: str) -> int:
        return self.inner.size(name)

    def read_range(self, name: str, start: int, length: int) -> bytes:
        return self.inner.read_range(name, start, length)

    def read_ranges(self, name: str, ranges):
        self.calls.append(list(ranges))
        return self.inner.read_ranges(name, ranges)

    def read_file(self, name: str, limit: int) -> bytes:
        return self.inner.read_file(name, limit)


def test_reads_never_exceed_the_chunk_through_the_source_seam() -> None:
    folder = GENUINE / "llmc-qwen3moe-nvfp4"
    local = LocalSource(folder)
    ckpt = analyze(str(folder)).checkpoint
    recorder = RecordingSource(local)
    wanted = [ckpt.tensors[n] for n in ckpt.values]
    chunk = 4096
    result = scan_values(recorder, wanted, {s.name: s for s in ckpt.shards}, chunk=chunk)
    assert recorder.calls and all(len(c) == 1 and c[0][1] <= chunk for c in recorder.calls)
    assert result.tensors == ckpt.values.tensors  # same statistics as the local reader with its default chunk
    counters = ScanCounters()
    scan_values(local, wanted, {s.name: s for s in ckpt.shards}, chunk=chunk, counters=counters)
    assert 0 < counters.largest_read <= chunk


def test_plan_coalesces_small_gaps_and_splits_on_elements(tmp_path: Path) -> None:
    write_shard(
        tmp_path,
        "model.safetensors",
        [
            ("a.input_scale", "F32", [3], bytes(12)),
            ("a.weight", "U8", [100], bytes(100)),
            ("b.input_scale", "F32", [10], bytes(40)),
        ],
    )
    ckpt = load_checkpoint(LocalSource(tmp_path))
    shard = ckpt.shards[0]
    wanted = [ckpt.tensors["a.input_scale"], ckpt.tensors["b.input_scale"]]
    [one] = plan_shard(shard, wanted, chunk=1 << 20, gap=100).reads  # through the 100-byte weight
    assert one.length == 152
    split = plan_shard(shard, wanted, chunk=10, gap=0).reads
    assert all(r.length <= 8 for r in split)  # 10 rounded down to whole F32 elements
    assert sum(r.length for r in split) == 52


def test_read_pieces_gives_positions_in_each_tensor(tmp_path: Path) -> None:
    data = bytes(range(200))
    write_shard(tmp_path, "model.safetensors", [("x.weight_scale", "F8_E4M3", [200], data)])
    source = open_source(str(tmp_path))
    ckpt = load_checkpoint(source)
    got = bytearray(200)
    for _tensor, offset, piece in read_pieces(source, ckpt.shards[0], [ckpt.tensors["x.weight_scale"]], chunk=7):
        assert len(piece) <= 7
        got[offset : offset + len(piece)] = piece
    assert bytes(got) == data


def test_stats_carry_over_a_rename() -> None:
    stats = ValueStats({"a.weight_scale": TensorStats("F8_E4M3", 4, nan=1), "b.input_scale": TensorStats("F32", 1)})
    moved = stats.renamed({"a.weight_scale": "model.a.weight_scale", "b.input_scale": None})
    assert dict(moved.items()) == {"model.a.weight_scale": TensorStats("F8_E4M3", 4, nan=1)}
    assert stats.renamed({}).tensors == stats.tensors


def test_scrub_nan_plans_from_statistics_and_refuses_bytes_that_changed(tmp_path: Path) -> None:
    from ckpt_tools.errors import TargetError
    from ckpt_tools.repair import scrub_nan

    folder = copy_fixture("modelopt-llama-nvfp4", tmp_path / "m")
    patch_tensor_bytes(folder, BLOCK, {0: 0x7F, 700: 0xFF})
    analysis = analyze(str(folder))
    plan = scrub_nan.plan(analysis, str(folder), "max")
    [edit] = plan.edits.values()
    assert [(p.tensor, p.position, p.old, p.new) for p in edit.patches] == [
        (BLOCK, 0, 0x7F, 0x7E),
        (BLOCK, 700, 0xFF, 0x7E),
    ]
    patch_tensor_bytes(folder, BLOCK, {5: 0x7F})  # the file moves on after the scan: the plan must not guess
    with pytest.raises(TargetError, match="changed while it was being read"):
        scrub_nan.plan(analysis, str(folder), "max")


def test_a_shard_cut_short_after_its_header_was_read_is_a_clear_error(tmp_path: Path) -> None:
    from ckpt_tools.errors import TargetError

    path = write_shard(tmp_path, "model.safetensors", [("x.weight_scale", "F8_E4M3", [4096], bytes(4096))])
    source = LocalSource(tmp_path)
    ckpt = load_checkpoint(source)
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(TargetError, match=re.escape("cannot read the scale values of model.safetensors")):
        scan_values(source, list(ckpt.tensors.values()), {s.name: s for s in ckpt.shards})


def test_the_checkpoint_says_why_values_were_not_read() -> None:
    ckpt = analyze(str(GENUINE / "modelopt-llama-nvfp4"), headers_only=True).checkpoint
    assert ckpt.values is None and "--headers-only" in (ckpt.values_skipped or "")
    scanned = analyze(str(GENUINE / "modelopt-llama-nvfp4")).checkpoint
    assert scanned.values is not None and scanned.values_skipped is None


@pytest.mark.parametrize("dtype", ["F32", "BF16", "F16"])
def test_wide_floats_are_decoded_a_bounded_step_at_a_time(
    dtype: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ckpt_tools.read.value_measure as values

    monkeypatch.setattr(values, "WIDE_STEP", 12)  # a multiple of every item size, far below the piece
    tensors = crafted(dtype, random.Random(7))
    write_shard(tmp_path, "model.safetensors", tensors)
    ckpt = load_checkpoint(LocalSource(tmp_path))
    result = scan_values(LocalSource(tmp_path), list(ckpt.tensors.values()), {s.name: s for s in ckpt.shards})
    for name, _d, _s, blob in tensors:
        assert_matches(result.get(name), dtype, blob)


@pytest.mark.skipif(not hasattr(__import__("os"), "posix_fadvise"), reason="no posix_fadvise here")
def test_local_reads_are_hinted_and_work_where_hints_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    data = bytes([0x38]) * 10_000
    write_shard(tmp_path, "model.safetensors", [("x.weight_scale", "F8_E4M3", [10_000], data)])
    source = LocalSource(tmp_path)
    ckpt = load_checkpoint(source)
    args = (source, list(ckpt.tensors.values()), {s.name: s for s in ckpt.shards})
    hints: list[int] = []
    real = os.posix_fadvise

    def record(fd: int, start: int, length: int, advice: int) -> None:
        hints.append(advice)
        real(fd, start, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", record)
    with monkeypatch.context() as cold:  # residency unknown: every read is hinted, as on a cold cache
        cold.setattr(residency, "_snapshot", lambda *_a: None)
        assert scan_values(*args, chunk=4096).get("x.weight_scale").count == 10_000
    assert hints[0] == os.POSIX_FADV_SEQUENTIAL  # one dense region
    assert hints.count(os.POSIX_FADV_WILLNEED) == hints.count(os.POSIX_FADV_DONTNEED) == 3  # 3 reads of <= 4 KiB
    if residency.supported():  # the file was just written: its pages are cached, so nothing is hinted or dropped
        hints.clear()
        assert scan_values(*args, chunk=4096).get("x.weight_scale").count == 10_000
        assert hints == [os.POSIX_FADV_SEQUENTIAL]

    def refuse(*_args: object) -> None:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "posix_fadvise", refuse)
    assert scan_values(*args, chunk=4096).get("x.weight_scale").count == 10_000


# ---- zero output channels (zero-scale-row, CK504) -----------------------------------------------------------------


def _zero_codes(dtype: str) -> list[bytes]:
    """Every encoding of zero in a dtype (+0 and, where the format has it, -0)."""
    if dtype in FLOAT8_DTYPES:
        return [bytes([c]) for c in range(256) if reference_class(dtype, c) == "zero"]
    return [wide_bytes(dtype, [0.0]), wide_bytes(dtype, [-0.0])]


def _nonzero_code(dtype: str, rng: random.Random) -> bytes:
    if dtype in FLOAT8_DTYPES:
        return bytes([rng.choice([c for c in range(256) if reference_class(dtype, c) != "zero"])])
    return wide_bytes(dtype, [rng.choice([0.5, -2.0, math.nan, math.inf, 1e-7])])  # 1e-7: subnormal in F16


def _channel_tensor(dtype: str, rows: int, cols: int, rng: random.Random) -> tuple[bytes, list[list[bool]]]:
    """A (rows, cols) tensor where about a third of the rows and some columns are all zero, the zeros in any
    encoding; returns its bytes and the zero mask."""
    zero_rows = {r for r in range(rows) if rng.random() < 0.35}
    zero_cols = {c for c in range(cols) if rng.random() < 0.2}
    mask, out = [], bytearray()
    for r in range(rows):
        row = []
        for c in range(cols):
            z = r in zero_rows or c in zero_cols or rng.random() < 0.3
            out += rng.choice(_zero_codes(dtype)) if z else _nonzero_code(dtype, rng)
            row.append(z)
        mask.append(row)
    return bytes(out), mask


@pytest.mark.parametrize("dtype", sorted(STATS_DTYPES - {"F8_E8M0"}))
def test_zero_channels_are_exact_whatever_the_chunking(dtype: str, tmp_path: Path) -> None:
    rng = random.Random(f"zero-{dtype}")
    rows_blob, rows_mask = _channel_tensor(dtype, 23, 7, rng)  # weight_scale (out, in / group): channels are rows
    cols_blob, cols_mask = _channel_tensor(dtype, 5, 31, rng)  # GPTQ `scales` (groups, out): channels are columns
    experts_blob, experts_mask = _channel_tensor(dtype, 12, 1, rng)  # per-channel (out, 1), as (2, 6, 1) experts
    tensors = [
        ("m.weight_scale", dtype, [23, 7], rows_blob),
        ("m.scales", dtype, [5, 31], cols_blob),
        ("e.weight_scale", dtype, [2, 6, 1], experts_blob),
        ("m.input_scale", dtype, [12], experts_blob),  # no channel layout: not counted
    ]
    write_shard(tmp_path, "model.safetensors", tensors)
    source = LocalSource(tmp_path)
    ckpt = load_checkpoint(source)
    shards = {s.name: s for s in ckpt.shards}
    zero_rows = [r for r, row in enumerate(rows_mask) if all(row)]
    zero_cols = [c for c in range(31) if all(cols_mask[r][c] for r in range(5))]
    zero_experts = [r for r, row in enumerate(experts_mask) if all(row)]
    assert zero_rows and zero_cols and zero_experts  # the seed exercises every layout
    item = 1 if dtype in FLOAT8_DTYPES else len(wide_bytes(dtype, [0.0]))
    for chunk in (item, 3 * item, 5 * item, 64, 1 << 20):
        result = scan_values(source, list(ckpt.tensors.values()), shards, chunk=chunk)
        got = {n: (result.get(n).channels, result.get(n).zero_rows, result.get(n).first_zero_row) for n in result}
        assert got["m.weight_scale"] == (23, len(zero_rows), zero_rows[0]), chunk
        assert got["m.scales"] == (31, len(zero_cols), zero_cols[0]), chunk
        assert got["e.weight_scale"] == (12, len(zero_experts), zero_experts[0]), chunk
        assert got["m.input_scale"] == (0, 0, None)


def test_zero_channels_of_an_all_zero_tensor_and_a_clean_one(tmp_path: Path) -> None:
    tensors = [
        ("z.weight_scale", "F8_E4M3", [64, 16], bytes(1024)),
        ("z.scales", "F16", [4, 8], bytes(64)),
        ("c.weight_scale", "F8_E4M3", [64, 16], bytes([0x38]) * 1024),
        ("x.weight_scale", "F8_E8M0", [64, 16], bytes(1024)),  # 0x00 is 2^-127 in E8M0, not zero
    ]
    write_shard(tmp_path, "model.safetensors", tensors)
    source = LocalSource(tmp_path)
    ckpt = load_checkpoint(source)
    result = scan_values(source, list(ckpt.tensors.values()), {s.name: s for s in ckpt.shards}, chunk=100)
    assert (result.get("z.weight_scale").zero_rows, result.get("z.weight_scale").first_zero_row) == (64, 0)
    assert (result.get("z.scales").channels, result.get("z.scales").zero_rows) == (8, 8)
    assert result.get("c.weight_scale").zero_rows == 0 and result.get("c.weight_scale").channels == 64
    assert result.get("x.weight_scale").zero_rows == 0


@pytest.mark.parametrize("dtype", sorted(STATS_DTYPES))
def test_one_element_scales_are_exact_for_every_special_value(dtype: str, tmp_path: Path) -> None:
    # Global / input scales are one element each: the scan measures them on a path of their own (`small_stats`).
    if dtype in FLOAT8_DTYPES:
        blobs = [bytes([c]) for c in range(256)]
    else:
        blobs = [wide_bytes(dtype, [v]) for v in SPECIAL_WIDE]
    tensors = [(f"m{i}.input_scale", dtype, [1], blob) for i, blob in enumerate(blobs)]
    write_shard(tmp_path, "model.safetensors", tensors)
    source = LocalSource(tmp_path)
    ckpt = load_checkpoint(source)
    result = scan_values(source, list(ckpt.tensors.values()), {s.name: s for s in ckpt.shards})
    for name, _dtype, _shape, blob in tensors:
        assert_matches(result.get(name), dtype, blob)


def test_tensors_read_whole_share_results_only_where_their_bytes_and_layout_agree(tmp_path: Path) -> None:
    # A tensor read whole in one piece is measured on the spot, and the results of small tensors with the same bytes
    # and of all-zero tensors with the same layout are shared: every tensor still gets what splitting it would give.
    tensors = [
        ("a.weight_scale", "F8_E4M3", [64, 16], bytes(1024)),
        ("b.weight_scale", "F8_E4M3", [64, 16], bytes(1024)),
        ("c.weight_scale", "F8_E4M3", [32, 32], bytes(1024)),  # same bytes, other channels
        ("d.weight_scale", "F8_E4M3", [1024], bytes(1024)),  # same bytes, no channel layout
        ("a.input_global_scale", "F32", [1], struct.pack("<f", 0.0)),
        ("b.input_global_scale", "F32", [1], struct.pack("<f", 0.0)),
        ("c.input_global_scale", "F32", [1], struct.pack("<f", -0.0)),
        ("d.input_global_scale", "BF16", [2], bytes(4)),  # the same four bytes in another dtype
        ("e.weight_scale", "F8_E4M3", [64, 16], bytes([0x38]) * 1023 + b"\x00"),
    ]
    write_shard(tmp_path, "model.safetensors", tensors)
    source = LocalSource(tmp_path)
    ckpt = load_checkpoint(source)
    args = (source, list(ckpt.tensors.values()), {s.name: s for s in ckpt.shards})
    whole, split = scan_values(*args), scan_values(*args, chunk=3)
    assert dict(whole.items()) == dict(split.items())
    assert whole.get("a.weight_scale").zero_rows == 64 and whole.get("c.weight_scale").channels == 32
    assert whole.get("d.weight_scale").channels == 0 and whole.get("d.input_global_scale").count == 2
    assert whole.get("c.input_global_scale").zero == 1 and whole.get("e.weight_scale").zero == 1


@pytest.mark.skipif(not residency.supported(), reason="page-cache residency is known on Linux only")
def test_residency_tells_cached_pages_from_dropped_ones(tmp_path: Path) -> None:
    import os

    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(256)) * 64 * 1024)  # 16 MiB, cached as written
    fd = os.open(path, os.O_RDONLY)
    try:
        page = residency.PAGE
        assert residency.Residency(fd, 10, 9 * page).cached(10, 9 * page)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        after = residency.Residency(fd, page, 4 * page)
        if after.cached(page, 4 * page):
            pytest.skip("this file system keeps every page resident (tmpfs)")
        assert not after.cached(page, 2 * page)
        assert not after.cached(0, page)  # outside the range it describes: unknown, so hinted
        os.pread(fd, 2 * page, page)  # read back: resident again
        assert residency.Residency(fd, page, 4 * page).cached(page, 3 * page)
    finally:
        os.close(fd)


@pytest.mark.skipif(not residency.supported(), reason="page-cache residency is known on Linux only")
def test_residency_is_taken_per_bounded_window_before_the_window_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from ckpt_tools.read import value_scan

    data = bytes([0x38]) * 40_000
    write_shard(tmp_path, "model.safetensors", [("x.weight_scale", "F8_E4M3", [40_000], data)])
    source = LocalSource(tmp_path)
    ckpt = load_checkpoint(source)
    snapshots: list[int] = []
    real = residency._snapshot

    def counted(fd: int, offset: int, length: int) -> bytes | None:
        snapshots.append(length)
        return None if len(snapshots) % 2 else real(fd, offset, length)  # every other window: unknown (cold)

    hints: list[int] = []
    real_advise = os.posix_fadvise
    monkeypatch.setattr(
        os, "posix_fadvise", lambda fd, a, n, advice: hints.append(advice) or real_advise(fd, a, n, advice)
    )
    monkeypatch.setattr(residency, "_snapshot", counted)
    monkeypatch.setattr(value_scan, "RESIDENCY_WINDOW", 8192)
    stats = scan_values(source, list(ckpt.tensors.values()), {s.name: s for s in ckpt.shards}, chunk=4096)
    assert stats.get("x.weight_scale").count == 40_000
    assert len(snapshots) == 5 and max(snapshots) <= 8192 + residency.PAGE  # 10 reads of 4 KiB, 2 per window
    # The cold windows' reads are hinted and dropped (about half of the 10); the cached ones get no hint.
    assert 4 <= hints.count(os.POSIX_FADV_WILLNEED) == hints.count(os.POSIX_FADV_DONTNEED) <= 6


@pytest.mark.parametrize("dtype", ["F8_E4M3", "F8_E5M2", "F8_E8M0"])
def test_all_plain_finds_one_special_code_in_any_step(dtype: str) -> None:
    """A read is judged step by step (`PLAIN_STEP` bytes per min / max pair): a single code outside the plain run,
    in the first step, a later one, the last byte or a short last step, makes it not plain."""
    from ckpt_tools.model.values import float8_table
    from ckpt_tools.read.value_measure import PLAIN_STEP, all_plain

    lo, hi = float8_table(dtype).plain_range
    size = 3 * PLAIN_STEP + 1000  # a short last step
    clean = bytes([lo, hi]) * (size // 2)
    assert all_plain(dtype, clean) and all_plain(dtype, memoryview(clean))
    outside = [c for c in (lo - 1, hi + 1) if 0 <= c <= 255]
    for code in outside:
        for at in (0, PLAIN_STEP - 1, PLAIN_STEP, 2 * PLAIN_STEP + 17, len(clean) - 1):
            dirty = bytearray(clean)
            dirty[at] = code
            assert not all_plain(dtype, dirty), (code, at)


@pytest.mark.parametrize("fixture", ["modelopt-qwen3moe-nvfp4", "llmc-llama-mxfp4", "autoround-llama-gptq"])
def test_the_scan_measures_what_wanted_accepts_in_the_shards_given(fixture: str) -> None:
    """`scan_values(wanted=)` takes a whole checkpoint's tensors: it measures those `wanted` accepts, in a shard of
    the given ones only (an invalid shard is left out: its offsets cannot be trusted), in load order per shard."""
    source = LocalSource(GENUINE / fixture)
    ckpt = analyze(str(GENUINE / fixture), headers_only=True).checkpoint
    wanted = wanted_values(value_rules(())[0])
    every = {s.name: s for s in ckpt.shards}
    for shards in (every, {n: s for n, s in every.items() if n != ckpt.shards[0].name}):
        expected = [t for t in ckpt.tensors.values() if t.shard in shards and wanted(t)]
        picked = scan_values(source, list(ckpt.tensors.values()), shards, wanted=wanted)
        assert sorted(picked) == sorted(t.name for t in expected)
        assert list(picked.items()) == list(scan_values(source, expected, shards).items())
        assert expected or len(shards) != len(every)
