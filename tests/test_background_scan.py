"""The value scan beside the header analysis: a forked child (Linux, local, no other thread) or a thread gives the
very statistics an in-process scan gives, in its order; the child's errors are the parent's; an analysis that ends
first leaves no process behind; and the verdict is the same whichever way the scan ran."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from pathlib import Path

import pytest

from ckpt_tools.errors import TargetError
from ckpt_tools.pipeline import analyze, value_rules, wanted_values
from ckpt_tools.read.background_scan import BackgroundScan, forkable
from ckpt_tools.read.loader import load_checkpoint, scan_plan
from ckpt_tools.read.local import LocalSource
from ckpt_tools.read.value_scan import scan_values
from tests.corrupt import GENUINE, copy_fixture

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forked scan is Linux-only")
FIXTURES = sorted(p.name for p in GENUINE.iterdir() if p.is_dir())


def plan(folder: Path):
    """(source, checkpoint, wanted) for a BackgroundScan; `direct(...)` is the same scan in this thread."""
    source = LocalSource(folder)
    return source, load_checkpoint(source), wanted_values(value_rules(())[0])


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


def hanging_scan(*args, **kwargs):
    time.sleep(600)


@linux_only
def test_closing_a_running_forked_scan_leaves_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from ckpt_tools.read import background_scan

    monkeypatch.setattr(background_scan, "_scan", hanging_scan)  # the child inherits it: a scan still running
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

    monkeypatch.setattr(background_scan, "_scan", hanging_scan)
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
