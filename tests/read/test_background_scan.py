"""The value scan beside the header analysis: a forked child (Linux, local, no other thread) or a thread gives the
very statistics an in-process scan gives, in its order; the child's errors are the parent's; an analysis that ends
first leaves no process behind; and the verdict is the same whichever way the scan ran."""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from ckpt_tools.errors import TargetError
from ckpt_tools.pipeline import analyze, value_rules, wanted_values
from ckpt_tools.read import residency
from ckpt_tools.read.background_scan import BackgroundScan, forkable
from ckpt_tools.read.loader import load_checkpoint
from ckpt_tools.read.local import LocalSource
from ckpt_tools.read.value_scan import scan_values
from tests.corrupt import GENUINE, copy_fixture

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forked scan is Linux-only")
FIXTURES = sorted(p.name for p in GENUINE.iterdir() if p.is_dir())


def plan(folder: Path):
    """(source, checkpoint, wanted) for a BackgroundScan; `direct(...)` is the same scan in this thread."""
    source = LocalSource(folder)
    return source, load_checkpoint(source), wanted_values(value_rules(())[0])


def scan_plan(ckpt, wanted):
    """The per-tensor selection the scan makes in its own pass: the wanted loaded tensors in valid shards."""
    shards = {s.name: s for s in ckpt.shards if s.valid}
    return [t for t in ckpt.tensors.values() if t.shard in shards and wanted(t)], shards


def direct(source, ckpt, wanted):
    return scan_values(source, *scan_plan(ckpt, wanted))


@linux_only
@pytest.mark.parametrize("fixture", FIXTURES)
def test_the_forked_scan_returns_the_in_process_statistics_in_their_order(fixture: str) -> None:
    args = plan(GENUINE / fixture)
    here = direct(*args)
    scan = BackgroundScan(*args)
    try:
        assert scan.forked
        forked = scan.result()
    finally:
        scan.close()
    assert list(forked.items()) == list(here.items())
    assert forked.bytes_read == here.bytes_read


def test_the_threaded_scan_returns_the_in_process_statistics(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CKPT_SCAN_IN_THREAD", "1")
    args = plan(GENUINE / "llmc-qwen35moe-nvfp4")
    scan = BackgroundScan(*args)
    try:
        assert not scan.forked
        assert list(scan.result().items()) == list(direct(*args).items())
    finally:
        scan.close()


def test_no_fork_while_another_thread_runs_or_for_a_remote_source() -> None:
    source = LocalSource(GENUINE / "llmc-qwen35moe-nvfp4")
    assert forkable(source) == sys.platform.startswith("linux")
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not forkable(source)  # the child could inherit a lock that thread holds
    finally:
        stop.set()
        other.join()

    class Remote:
        is_remote = True

    assert not forkable(Remote())  # type: ignore[arg-type]


@pytest.mark.parametrize("in_thread", [False, True])
def test_a_shard_that_cannot_be_read_is_the_scans_own_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_thread: bool
) -> None:
    if in_thread:
        monkeypatch.setenv("CKPT_SCAN_IN_THREAD", "1")
    folder = copy_fixture("modelopt-llama-nvfp4", tmp_path)
    args = plan(folder)
    info = args[1].shards[0]
    shard = folder / info.name
    shard.write_bytes(shard.read_bytes()[: info.data_start + 16])  # cut short after its header was read
    scan = BackgroundScan(*args)
    try:
        with pytest.raises(TargetError, match=re.escape(f"cannot read the scale values of {shard.name}")):
            scan.result()
    finally:
        scan.close()


def cache(folder: Path) -> None:
    """Read every file of `folder` once: its pages are then in the page cache, which a mapped scan maps."""
    for p in folder.iterdir():
        p.read_bytes()


@pytest.mark.parametrize("fixture", FIXTURES)
def test_mapped_reads_measure_what_copied_reads_measure(fixture: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from ckpt_tools.read import value_scan

    cache(GENUINE / fixture)
    source, ckpt, wanted = plan(GENUINE / fixture)
    tensors, shards = scan_plan(ckpt, wanted)
    copied = scan_values(source, tensors, shards)
    maps = []
    real_map = value_scan.map_range

    def counted(fd: int, offset: int, length: int):
        maps.append(length)
        return real_map(fd, offset, length)

    monkeypatch.setattr(value_scan, "map_range", counted)
    mapped = scan_values(source, tensors, shards, mapped=True)
    assert list(mapped.items()) == list(copied.items())
    assert mapped.bytes_read == copied.bytes_read
    assert maps or not copied.bytes_read or not residency.supported()  # cached reads were mapped, not copied


def test_a_file_system_that_cannot_map_is_read_as_without_mappings(monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from ckpt_tools.read import value_scan

    cache(GENUINE / "modelopt-llama-nvfp4")
    source, ckpt, wanted = plan(GENUINE / "modelopt-llama-nvfp4")
    tensors, shards = scan_plan(ckpt, wanted)
    tried = []

    def no_mmap(fd: int, offset: int, length: int):
        tried.append(length)
        raise OSError(errno.ENODEV, "No such device")

    monkeypatch.setattr(value_scan, "map_range", no_mmap)
    assert list(scan_values(source, tensors, shards, mapped=True).items()) == list(
        scan_values(source, tensors, shards).items()
    )
    assert tried or not residency.supported()


def test_reads_from_the_disk_are_not_mapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read whose pages were not cached is read with preadv even by a mapped scan (paging in through a mapping
    is slower than the kernel's readahead)."""
    from ckpt_tools.read import value_scan

    source, ckpt, wanted = plan(copy_fixture("modelopt-llama-nvfp4", tmp_path))
    monkeypatch.setattr(value_scan._LocalReader, "_measure", lambda self, read: None)  # nothing found cached
    maps = []
    monkeypatch.setattr(value_scan, "map_range", lambda *a: maps.append(a))
    tensors, shards = scan_plan(ckpt, wanted)
    assert list(scan_values(source, tensors, shards, mapped=True).items()) == list(
        scan_values(source, tensors, shards).items()
    )
    assert not maps


def test_a_mapped_read_of_a_shortened_file_is_the_copied_reads_error(tmp_path: Path) -> None:
    folder = copy_fixture("modelopt-llama-nvfp4", tmp_path)
    source, ckpt, wanted = plan(folder)
    info = ckpt.shards[0]
    shard = folder / info.name
    shard.write_bytes(shard.read_bytes()[: info.data_start + 16])  # shorter than its header says: never mapped
    tensors, shards = scan_plan(ckpt, wanted)
    errors = []
    for mapped in (True, False):
        with pytest.raises(TargetError) as caught:
            scan_values(source, tensors, shards, mapped=mapped)
        errors.append(str(caught.value))
    assert errors[0] == errors[1]
    assert "the file ended" in errors[0]


@linux_only
def test_a_file_cut_under_the_childs_mapping_is_scanned_again_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child maps a read, then the file loses those bytes (another program truncates it): the child's next touch
    of the mapping is SIGBUS, which kills it; the parent then scans without mappings and reports the short file."""
    from ckpt_tools.read import background_scan, value_scan

    folder = copy_fixture("modelopt-llama-nvfp4", tmp_path)
    args = plan(folder)
    info = args[1].shards[0]
    real_map = value_scan.map_range
    cut = []

    def map_then_cut(fd: int, offset: int, length: int):
        mapping = real_map(fd, offset, length)
        os.truncate(folder / info.name, offset)  # in the child: every page of `mapping` is gone
        cut.append(offset)
        return mapping

    monkeypatch.setattr(value_scan, "map_range", map_then_cut)
    rescans = []
    real_here = background_scan._Forked._scan_here

    def scan_here(self):
        rescans.append(os.waitstatus_to_exitcode(self._status))
        return real_here(self)

    monkeypatch.setattr(background_scan._Forked, "_scan_here", scan_here)
    scan = BackgroundScan(*args)
    try:
        assert scan.forked
        with pytest.raises(TargetError, match=re.escape(f"cannot read the scale values of {info.name}")):
            scan.result()
    finally:
        scan.close()
    assert rescans == [-signal.SIGBUS]
    assert (folder / info.name).stat().st_size < info.size
    assert not cut  # the mapping happened in the child only


def hanging_scan(*args, **kwargs):
    time.sleep(600)


@linux_only
def test_closing_a_running_forked_scan_leaves_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from ckpt_tools.read import background_scan

    monkeypatch.setattr(background_scan, "_scan_columns", hanging_scan)  # the child inherits it: a scan still running
    scan = BackgroundScan(*plan(GENUINE / "llmc-qwen35moe-nvfp4"))
    pid = scan._runner._pid  # type: ignore[union-attr]
    assert scan.forked and pid
    t0 = time.monotonic()
    scan.close()  # before asking for the result: Ctrl-C or an error in the header analysis
    assert time.monotonic() - t0 < 5
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped, not a zombie
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@linux_only
def test_a_child_that_dies_is_an_error_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    from ckpt_tools.read import background_scan

    monkeypatch.setattr(background_scan, "_scan_columns", hanging_scan)
    scan = BackgroundScan(*plan(GENUINE / "llmc-qwen35moe-nvfp4"))
    try:
        os.kill(scan._runner._pid, signal.SIGKILL)  # type: ignore[union-attr, arg-type]
        with pytest.raises(
            RuntimeError, match=re.escape("value scan process ended without a result (killed by signal 9)")
        ):
            scan.result()
    finally:
        scan.close()


@pytest.mark.parametrize("fixture", ["llmc-qwen35moe-nvfp4", "modelopt-qwen35moe-fp8", "llmc-llama-fp8-block"])
def test_the_verdict_is_the_same_whichever_way_the_scan_ran(fixture: str, monkeypatch: pytest.MonkeyPatch) -> None:
    forked = analyze(str(GENUINE / fixture)).report.to_dict()
    monkeypatch.setenv("CKPT_SCAN_IN_THREAD", "1")
    assert analyze(str(GENUINE / fixture)).report.to_dict() == forked


@linux_only
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs /proc")
def test_ctrl_c_during_a_forked_scan_is_one_line_and_leaves_no_process(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) while the scan child reads 16 GiB of block
    scales (holes): the one line, exit 130 at once, and the child gone with its parent."""
    import signal
    import subprocess

    from bench.synth import write_shard

    # The data region is a hole: 16 GiB that take no disk.
    write_shard(
        tmp_path / "model.safetensors", [("model.layers.0.mlp.up_proj.weight_scale", "F8_E4M3", [1 << 20, 1 << 14])]
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckpt_tools.cli.main", "doctor", str(tmp_path)],
        env={**os.environ, "CKPT_NO_PROGRESS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    deadline = time.monotonic() + 60
    child = ""
    while not child and time.monotonic() < deadline and proc.poll() is None:
        child = children.read_text().strip() if children.exists() else ""
        time.sleep(0.01)
    assert child, "no scan process was started"
    time.sleep(0.3)  # well into the scan
    os.killpg(proc.pid, signal.SIGINT)
    t0 = time.monotonic()
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, err, out) == (130, "ckpt: interrupted\n", "")
    assert time.monotonic() - t0 < 8  # stopped, not waited for (the whole scan takes about 20 s here)
    with pytest.raises(ProcessLookupError):
        os.kill(int(child.split()[0]), 0)
