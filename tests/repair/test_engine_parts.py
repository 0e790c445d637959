"""The repair engine's parts: the changed-span finder, the journal format, the lock, the verifying writers, the copy
methods and the index layout."""

from __future__ import annotations

import json
import os
import random
import struct
from pathlib import Path

import orjson
import pytest

from ckpt_tools.errors import TargetError
from ckpt_tools.repair.execute import apply_header, apply_index, apply_patch, apply_rewrite
from ckpt_tools.repair.fsio import Folder, Writer
from ckpt_tools.repair.journal import JOURNAL_NAME, Lock, decode_journal, encode_journal
from ckpt_tools.repair.resume import resume
from ckpt_tools.repair.steps import HeaderStep, IndexStep, PatchStep, RewriteStep, Run, _dump_like, diff_span, sha256
from ckpt_tools.write.header import build_file


def test_diff_span_matches_brute_force():
    rng = random.Random(7)
    for _ in range(300):
        n = rng.choice([1, 5, 4096, 4097, 9000])
        a = bytes(rng.randrange(3) for _ in range(n))
        b = bytearray(a)
        for _ in range(rng.randrange(4)):
            b[rng.randrange(n)] = rng.randrange(3)
        diffs = [i for i in range(n) if a[i] != b[i]]
        assert diff_span(a, bytes(b)) == ((diffs[0], diffs[-1] + 1) if diffs else None)


STEPS = (
    HeaderStep("a.safetensors", 100, 64, 10, b"new bytes", sha256(b"old bytes"), sha256(b"rest"), "1 renamed"),
    PatchStep("b.safetensors", 200, (Run(80, b"\x7f\xff", b"\x7e\x7e"), Run(99, b"\x7f", b"\x00")), "3 patched"),
    RewriteStep(
        "c.safetensors",
        300,
        48,
        sha256(b"p"),
        b"\x08" + bytes(7) + b"{}      ",
        120,
        ((48, 16, 100), (160, 116, 4)),
        (Run(20, b"\xff", b"\x7e"),),
        "tensors dropped",
        "1 dropped",
    ),
    IndexStep("model.safetensors.index.json", sha256(b"{}"), b'{"weight_map": {}}\n', "1 key(s) removed"),
)


def test_journal_round_trip(tmp_path):
    raw = encode_journal("fix-prefix", tmp_path, STEPS)
    assert decode_journal(raw, tmp_path) == ("fix-prefix", STEPS)


@pytest.mark.parametrize("damage", ["truncate", "flip-blob", "garbage"])
def test_damaged_journal_is_refused(tmp_path, damage):
    raw = encode_journal("fix-prefix", tmp_path, STEPS)
    bad = {"truncate": raw[:-3], "flip-blob": raw[:-1] + bytes([raw[-1] ^ 1]), "garbage": b"CKPTJRN1" + raw[8:20]}
    with pytest.raises(TargetError, match="journal is damaged"):
        decode_journal(bad[damage], tmp_path)


def test_a_journal_from_another_folder_writes_nothing(tmp_path):
    (tmp_path / "here").mkdir()
    raw = encode_journal("fix-prefix", tmp_path / "elsewhere", STEPS)
    with pytest.raises(TargetError, match="was written for another folder"):
        decode_journal(raw, tmp_path / "here")


@pytest.mark.parametrize(
    "name", ["../outside.safetensors", "/etc/passwd", ".hidden.safetensors", "config.json", "sub/model.safetensors"]
)
def test_a_journal_may_only_name_checkpoint_files(tmp_path, name):
    step = IndexStep(name, sha256(b""), b"{}", "")
    with pytest.raises(TargetError, match="not a checkpoint file in this folder"):
        decode_journal(encode_journal("fix-prefix", tmp_path, (step,)), tmp_path)


def test_lock_is_exclusive_and_leaves_no_file(tmp_path):
    with Lock(tmp_path):
        with pytest.raises(TargetError, match="already running"), Lock(tmp_path):
            pass
        (tmp_path / JOURNAL_NAME).write_bytes(encode_journal("fix-prefix", tmp_path, ()))
        with pytest.raises(TargetError, match="already running"):
            resume(str(tmp_path))  # waits for nobody: it says a repair is running
    assert resume(str(tmp_path)).job == "fix-prefix"  # an empty journal completes at once
    with Lock(tmp_path):
        pass
    assert list(tmp_path.iterdir()) == []


def shard(tmp_path: Path) -> Path:
    path = tmp_path / "m.safetensors"
    path.write_bytes(build_file([("a.visual.w", "U8", [4], b"\x01\x02\x03\x04"), ("a.s", "F8_E4M3", [2], b"\x7f\x10")]))
    return path


def header_step(path: Path, new_name: bytes) -> HeaderStep:
    raw = path.read_bytes()
    n = struct.unpack_from("<Q", raw)[0]
    prefix = raw[: 8 + n]
    new_prefix = prefix.replace(b"a.visual.w", new_name)
    i, j = diff_span(prefix, new_prefix)
    return HeaderStep(
        path.name, len(raw), len(prefix), i, new_prefix[i:j], sha256(prefix[i:j]), sha256(prefix[:i] + prefix[j:]), ""
    )


def test_header_step_is_idempotent_and_completes_a_torn_write(tmp_path):
    path = shard(tmp_path)
    step = header_step(path, b"a.vision.w")
    raw = bytearray(path.read_bytes())
    raw[step.offset] = step.new[0]  # the first byte of the span written, the rest not: a torn write
    path.write_bytes(bytes(raw))
    writer = Writer()
    apply_header(Folder(tmp_path), step, writer, "t")
    assert b'"a.vision.w"' in path.read_bytes() and writer.written == len(step.new)
    apply_header(Folder(tmp_path), step, writer, "t")  # already done: nothing written
    assert writer.written == len(step.new)


def test_header_step_refuses_a_file_changed_elsewhere(tmp_path):
    path = shard(tmp_path)
    step = header_step(path, b"a.vision.w")
    changed = path.read_bytes().replace(b'"a.s"', b'"a.t"')
    path.write_bytes(changed)
    with pytest.raises(TargetError, match="neither what the repair found nor what it writes"):
        apply_header(Folder(tmp_path), step, Writer(), "t")
    assert path.read_bytes() == changed


def test_patch_step_checks_every_run_before_writing_any(tmp_path):
    path = shard(tmp_path)
    raw = path.read_bytes()
    at = raw.index(b"\x7f\x10")
    good = Run(at, b"\x7f", b"\x7e")
    bad = Run(at + 1, b"\xff", b"\x7e")  # the file holds 0x10 there: neither old nor new
    with pytest.raises(TargetError, match=f"data at byte {at + 1}"):
        apply_patch(Folder(tmp_path), PatchStep(path.name, len(raw), (good, bad), ""), Writer(), "t")
    assert path.read_bytes() == raw


def test_rewrite_step_refuses_a_changed_source_and_leaves_no_temp(tmp_path):
    path = shard(tmp_path)
    raw = path.read_bytes()
    # Planned for a file one byte longer than the one on disk, which is not the rewritten file either.
    step = RewriteStep(path.name, len(raw) + 1, 8, sha256(raw[:8]), b"X" * 8, len(raw) + 8, (), (), "test", "")
    with pytest.raises(TargetError, match="its header"):
        apply_rewrite(Folder(tmp_path), step, Writer(), "t")
    assert path.read_bytes() == raw and sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_index_step_refuses_a_changed_index(tmp_path):
    index = tmp_path / "model.safetensors.index.json"
    index.write_text('{"weight_map": {"b": "x"}}')
    with pytest.raises(TargetError, match="the index"):
        apply_index(
            Folder(tmp_path), IndexStep(index.name, sha256(b'{"weight_map": {"a": "x"}}'), b"{}", ""), Writer(), "t"
        )
    assert index.read_text() == '{"weight_map": {"b": "x"}}'


def test_index_step_with_its_old_bytes_writes_over_exactly_them(tmp_path):
    index = tmp_path / "model.safetensors.index.json"
    old = b'{"weight_map": {"a": "x"}}'
    step = IndexStep(index.name, sha256(old), b'{"weight_map": {"b": "x"}}', "", old=old)
    index.write_bytes(b'{"weight_map": {"c": "x"}}')
    with pytest.raises(TargetError, match="the index"):
        apply_index(Folder(tmp_path), step, Writer(), "t")
    assert index.read_bytes() == b'{"weight_map": {"c": "x"}}'
    index.write_bytes(old)
    apply_index(Folder(tmp_path), step, Writer(), "t")
    assert index.read_bytes() == step.new
    # A journal whose index step's old bytes are not those its hash names is damaged: never trusted either way.
    bad = IndexStep(index.name, sha256(b"other"), step.new, "", old=old)
    with pytest.raises(TargetError, match="journal is damaged"):
        decode_journal(encode_journal("fix-prefix", tmp_path, (bad,)), tmp_path)


@pytest.mark.parametrize("method", ["copy_file_range", "sendfile", "read/write"])
def test_every_copy_method_copies_exactly(tmp_path, method):
    data = os.urandom(3 * 1024 * 1024 + 17)
    (tmp_path / "src").write_bytes(data)
    writer = Writer(method=method)
    src = os.open(tmp_path / "src", os.O_RDONLY)
    dst = os.open(tmp_path / "dst", os.O_WRONLY | os.O_CREAT)
    try:
        writer.pwrite(dst, b"HEAD", 0)
        writer.copy(src, dst, 5, 4, len(data) - 5)
    finally:
        os.close(src)
        os.close(dst)
    assert (tmp_path / "dst").read_bytes() == b"HEAD" + data[5:]
    assert writer.copied_with == {method} and writer.written == 4 + len(data) - 5


@pytest.mark.parametrize(
    "layout",
    [
        lambda d: json.dumps(d, indent=2, sort_keys=True) + "\n",
        lambda d: json.dumps(d, indent=4),
        lambda d: json.dumps(d, separators=(",", ":")),
        lambda d: json.dumps(d),
        lambda d: json.dumps(d, indent=2, ensure_ascii=False) + "\n",
    ],
)
def test_index_keeps_its_layout(layout):
    data = {"metadata": {"total_size": 3, "note": "für"}, "weight_map": {"a.w": "x", "b.w": "y"}}
    raw = layout(data).encode()
    assert _dump_like(json.loads(raw), raw) == raw


def test_index_rewrite_counts_and_refuses_colliding_keys(tmp_path: Path) -> None:
    # The index step renames keys in one pass and names the first collision, in index order, when there is one.
    from types import MappingProxyType

    from ckpt_tools.read.loader import load_checkpoint
    from ckpt_tools.read.local import LocalSource
    from ckpt_tools.repair.edits import Plan
    from ckpt_tools.repair.steps import IndexStep, compile_plan
    from ckpt_tools.write.header import build_file

    (tmp_path / "model-00001-of-00001.safetensors").write_bytes(
        build_file([(n, "BF16", [1], b"\x00\x00") for n in ("a.w", "b.w", "c.w", "d.w")])
    )
    index = {
        "metadata": {},
        "weight_map": dict.fromkeys(["d.w", "a.w", "c.w", "b.w"], "model-00001-of-00001.safetensors"),
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    ckpt = load_checkpoint(LocalSource(tmp_path))

    def index_step(renames: dict[str, str], drops: frozenset[str] = frozenset()) -> IndexStep:
        plan = Plan("t", "t", MappingProxyType({}), MappingProxyType(renames), drops)
        (step,) = compile_plan(plan, ckpt, tmp_path)
        assert isinstance(step, IndexStep)
        return step

    step = index_step({"a.w": "x.w", "b.w": "y.w"}, frozenset({"d.w"}))
    assert list(json.loads(step.new)["weight_map"]) == ["x.w", "c.w", "y.w"]  # an unsorted index keeps its order
    assert step.note == "2 key(s) renamed, 1 key(s) removed"
    assert list(json.loads(index_step({"d.w": "a.w"}, frozenset({"a.w"})).new)["weight_map"]) == ["a.w", "c.w", "b.w"]
    with pytest.raises(TargetError, match=r"two entries would both be named `c\.w`"):
        index_step({"a.w": "c.w", "b.w": "c.w"})


INDEX = "model.safetensors.index.json"


def _index_bytes(names: list[str]) -> bytes:
    weight_map = dict.fromkeys(sorted(names), "model-00001-of-00002.safetensors")
    return (
        json.dumps({"metadata": {"total_size": 1}, "weight_map": weight_map}, indent=2, sort_keys=True) + "\n"
    ).encode()


LAYERS = [f"model.language_model.layers.{i}.mlp.experts.{e}.w" for i in range(40) for e in range(64)]
VISUAL = [f"model.language_model.visual.blocks.{i}.w" for i in range(50)]


MOVED = [*LAYERS, *(n.replace("language_model.visual", "visual") for n in VISUAL)]
SPLICES = {  # new key set -> whether the journal holds a splice (what differs is a small part of a big index)
    "a component renamed, its keys move": (MOVED, True),
    "one key in the middle renamed in place": ([*LAYERS[:1000], LAYERS[1000] + "_", *LAYERS[1001:], *VISUAL], True),
    "the first and the last key change": (["a.first", *LAYERS, *VISUAL, "zz.last"], False),
    "most of the map removed": (LAYERS[:10], False),
}


@pytest.mark.parametrize(("new_names", "spliced"), SPLICES.values(), ids=SPLICES.keys())
def test_index_step_journals_its_new_bytes_as_a_splice_of_the_old(tmp_path, new_names, spliced):
    old, new = _index_bytes([*LAYERS, *VISUAL]), _index_bytes(new_names)
    step = IndexStep(INDEX, sha256(old), new, "renamed", old=old)
    raw = encode_journal("fix-prefix", tmp_path, (step,))
    _job, (decoded,) = decode_journal(raw, tmp_path)
    assert decoded == step and decoded.new == new and decoded.old == old
    assert (b'"new_splice"' in raw) == spliced
    if spliced:  # the old bytes and the part that differs
        assert len(raw) < len(old) + 20_000 < len(old) + len(new)
    else:
        assert len(raw) > len(old) + len(new)
    # Rolled back, the inverse step (old and new swapped) is spliced the same way and decodes to the same bytes.
    back = IndexStep(INDEX, sha256(new), old, "restore", old=new)
    assert decode_journal(encode_journal("fix-prefix rollback", tmp_path, (back,)), tmp_path)[1] == (back,)


def test_a_small_index_step_keeps_its_new_bytes_whole(tmp_path):
    old, new = b'{"weight_map": {"a": "s"}}\n', b'{"weight_map": {"b": "s"}}\n'
    raw = encode_journal("fix-prefix", tmp_path, (IndexStep(INDEX, sha256(old), new, "", old=old),))
    assert b'"new_splice"' not in raw and decode_journal(raw, tmp_path)[1][0].new == new


def test_a_spliced_journal_is_refused_by_a_reader_without_splices_and_when_damaged(tmp_path):
    old = _index_bytes([*LAYERS, *VISUAL])
    new = _index_bytes([*LAYERS, *(n.replace("language_model.visual", "visual") for n in VISUAL)])
    raw = encode_journal("fix-prefix", tmp_path, (IndexStep(INDEX, sha256(old), new, "", old=old),))
    (n,) = struct.unpack_from("<Q", raw, 8)
    manifest = orjson.loads(raw[16 : 16 + n])
    (item,) = manifest["steps"]
    assert "new" not in item  # a reader that knows no splices finds no new bytes: it refuses, never writes a part
    for bad in ([0, len(old) + 1, 0, 10], [5, 4, 0, 10], [0, 10, len(raw), 10], ["x", 1, 0, 1]):
        damaged = {**manifest, "steps": [{**item, "new_splice": bad}]}
        body = orjson.dumps(damaged)
        with pytest.raises(TargetError, match="journal is damaged"):
            decode_journal(raw[:8] + struct.pack("<Q", len(body)) + body + raw[16 + n :], tmp_path)


def test_lock_waits_for_a_holder_that_is_dying(tmp_path, monkeypatch):
    """A repair SIGKILLed mid-scan leaves its forked scan child holding the lock's file description for a moment; the
    next run waits for it (up to LOCK_GRACE_SECONDS) instead of calling the folder busy."""
    import fcntl
    import os
    import time

    from ckpt_tools.repair import journal

    monkeypatch.setattr(journal, "LOCK_GRACE_SECONDS", 5.0)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    pid = os.fork()
    if pid == 0:  # the dying holder: keeps the inherited description a moment, then goes
        time.sleep(0.4)
        os._exit(0)
    os.close(fd)  # the parent (the killed repair) is gone; only the child holds the lock now
    started = time.monotonic()
    with Lock(tmp_path):
        waited = time.monotonic() - started
    os.waitpid(pid, 0)
    assert 0.2 < waited < 5.0
