"""Crash safety as a property: repairs are SIGKILLed at every step boundary (injected with CKPT_REPAIR_CRASH_AT,
including torn writes) and at random instants, in a real subprocess. After each kill:

- every shard and the index hold either their old or their new bytes, unless a journal exists (it alone may cover
  an in-place write cut short); every shard that is old or new loads with the safetensors library;
- with no journal, the checkpoint is entirely old or entirely new, and the index agrees with the shards;
- reading the checkpoint (doctor) reports the pending journal (CK109) and changes nothing;
- the next writing run completes the repair from the journal (`ckpt repair --resume`, or the same repair): every
  file then holds the new bytes, every tensor's data equals the original, the index agrees, and nothing is left
  behind; or `ckpt repair --rollback` restores every file's old bytes, except once a shard was rebuilt (its old
  bytes are not in the journal), where it refuses and changes nothing.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from ckpt_tools.errors import TargetError
from ckpt_tools.pipeline import analyze
from ckpt_tools.repair import Job, drop_orphans, fix_prefix, run, scrub_nan
from ckpt_tools.repair.journal import JOURNAL_NAME
from ckpt_tools.repair.resume import resume
from ckpt_tools.repair.steps import Step
from tests.corrupt import patch_tensor_bytes
from tests.repair_helpers import (
    MISNESTED_FIXTURE,
    add_tensors,
    assert_index_agrees,
    copy_of,
    file_bytes,
    leftovers,
    library_view,
    make_sharded,
    renamed_view,
)

REPO = Path(__file__).resolve().parents[2]
POINTS = {
    "header": ("before", "torn", "after"),
    "patch": ("before", "partial", "after"),
    "rewrite": ("before", "copy", "synced", "renamed", "after"),
    "index": ("before", "torn", "synced", "renamed", "after"),
}
RANDOM_KILLS = 4  # per scenario, on top of the injected points
PARALLEL = 4  # injected-kill processes alive at once
SEED = int(os.environ.get("CKPT_CRASH_SEED", "20240611"))


@dataclass(frozen=True)
class Scenario:
    name: str
    build: Callable[[Path], Path]
    argv: tuple[str, ...]
    job: Callable[[], Job]
    expected_view: Callable[[dict], dict]  # original library view -> the view after the repair


def build_rename(where: Path) -> Path:
    folder = make_sharded(copy_of(MISNESTED_FIXTURE, where))
    return folder


ORPHANS = [
    ("lm_head.input_scale", "F32", [], b"\x00\x00\x80\x3f"),
    ("model.layers.1.mlp.up_proj.k_scale", "F32", [], b"\x00\x00\x00\x40"),
]
BIG = ("model.layers.0.mlp.big_buffer", "BF16", [4096, 2048], os.urandom(4096 * 2048 * 2))


def build_drop(where: Path) -> Path:
    folder = make_sharded(copy_of("modelopt-llama-nvfp4", where))
    add_tensors(folder, [BIG], beside="lm_head.weight")  # 16 MiB to copy, so random kills land mid-copy
    add_tensors(folder, ORPHANS, beside="lm_head.weight")
    return folder


NAN = {
    "model.layers.0.mlp.down_proj.weight_scale": {0: 0x7F, 1: 0xFF, 9: 0x7F},
    "model.layers.1.self_attn.o_proj.weight_scale": {4: 0xFF},
}


def build_scrub(where: Path) -> Path:
    folder = make_sharded(copy_of("modelopt-llama-nvfp4", where))
    for name, positions in NAN.items():
        patch_tensor_bytes(folder, name, positions)
    return folder


def scrubbed(view: dict) -> dict:
    out = dict(view)
    for name, positions in NAN.items():
        shard, dtype, shape, data = out[name]
        data = bytearray(data)
        for pos in positions:
            data[pos] = 0x7E
        out[name] = (shard, dtype, shape, bytes(data))
    return out


SCENARIOS = [
    Scenario(
        "fix-prefix (header in place + index)",
        build_rename,
        ("fix-prefix",),
        fix_prefix.job,
        lambda v: renamed_view(v, "model.language_model.visual.", "model.visual."),
    ),
    Scenario(
        "drop-orphans (shard rewrite + index)",
        build_drop,
        ("drop-orphans", "-t", ORPHANS[0][0], "-t", ORPHANS[1][0]),
        lambda: drop_orphans.job([o[0] for o in ORPHANS]),
        lambda v: {k: x for k, x in v.items() if k not in {o[0] for o in ORPHANS}},
    ),
    Scenario("scrub-nan (byte patches in two shards)", build_scrub, ("scrub-nan",), scrub_nan.job, scrubbed),
]


def points_for(steps: tuple[Step, ...], *, journal: bool) -> list[str]:
    """Injected kill points. `stepN:before` is the state `stepN-1:after` leaves, so only step 0 gets one; the
    journal's own points are the same code for every job, so one scenario covers them."""
    pts = ["journal:torn", "journal:synced", "journal:renamed"] if journal else []
    for i, step in enumerate(steps):
        pts += [f"step{i}:{p}" for p in POINTS[step.kind] if i == 0 or p != "before"]
    return pts + (["done"] if journal else [])


def spawn(argv: tuple[str, ...], folder: Path, crash_at: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "CKPT_NO_PROGRESS": "1", "PYTHONPATH": str(REPO)}
    env.pop("CKPT_REPAIR_CRASH_AT", None)
    if crash_at:
        env["CKPT_REPAIR_CRASH_AT"] = crash_at
    return subprocess.Popen(
        [sys.executable, "-m", "ckpt_tools.cli.main", argv[0], str(folder), *argv[1:]],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def kill_at_random(proc: subprocess.Popen, folder: Path, rng: random.Random) -> None:
    """Half the time: a uniformly random instant of the whole run. Otherwise: wait until the journal appears (the
    repair is writing), then kill within the next 25 ms."""
    if rng.random() < 0.5:
        time.sleep(rng.uniform(0.0, 1.2))
    else:
        journal = folder / JOURNAL_NAME
        deadline = time.monotonic() + 10
        while proc.poll() is None and not journal.exists() and time.monotonic() < deadline:
            time.sleep(0.0002)
        time.sleep(rng.uniform(0.0, 0.025))
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def check_after_kill(folder: Path, old: dict[str, bytes], new: dict[str, bytes], point: str) -> bool:
    """The state a kill leaves. Returns whether a journal is pending."""
    pending = (folder / JOURNAL_NAME).exists()
    now = {f: b for f, b in file_bytes(folder).items() if not f.startswith(".")}
    assert set(now) == set(old), f"{point}: files appeared or vanished: {set(now) ^ set(old)}"
    changed = [f for f in old if old[f] != new[f]]
    states = {}
    for f in old:
        if f not in changed:
            assert now[f] == old[f], f"{point}: {f} is not part of the repair but changed"
            continue
        states[f] = "old" if now[f] == old[f] else "new" if now[f] == new[f] else "mixed"
        if states[f] == "mixed":
            assert pending, f"{point}: {f} is neither old nor new and no journal covers it"
            assert point.endswith((":torn", ":partial")) or point.startswith("random"), (
                f"{point}: {f} is mixed, which only a write cut short inside a file may leave"
            )
            assert f.endswith(".safetensors"), f"{point}: the index is only ever replaced whole"
        if f.endswith(".safetensors") and _prefix_is_whole(now[f], old[f], new[f]):
            library_view_of_one(folder / f)  # old or new header, data old, new or partly patched: it loads
    if not pending:
        assert len(set(states.values())) == 1 and "mixed" not in states.values(), f"{point}: {states}"
        library_view(folder)
        assert_index_agrees(folder)
    return pending


def _prefix_is_whole(now: bytes, old: bytes, new: bytes) -> bool:
    """Whether the length field and header of `now` are exactly the old or the new ones (not a torn header)."""
    return any(
        now[: 8 + struct.unpack_from("<Q", ref)[0]] == ref[: 8 + struct.unpack_from("<Q", ref)[0]] for ref in (old, new)
    )


def library_view_of_one(shard: Path) -> None:
    from safetensors import safe_open

    with safe_open(str(shard), "np") as fh:
        assert fh.keys() is not None


def assert_reported_not_acted_on(folder: Path, pending: bool) -> None:
    """Reading (doctor, inspect, serve-flags) reports an interrupted repair as CK109 and writes nothing."""
    before = file_bytes(folder)
    report = analyze(str(folder), headers_only=True).report
    assert file_bytes(folder) == before, "reading the checkpoint changed it"
    assert any(f.code == "CK109" and f.severity == "error" for f in report.findings) == pending


def next_run(
    folder: Path, scenario: Scenario, k: int, subprocess_resume: bool, old: dict[str, bytes], pending: bool
) -> str:
    """The next writing run: `ckpt repair --resume` as its own process, or in this process `--resume`, `--rollback`
    or the same repair. Returns which ran."""
    if subprocess_resume:
        proc = subprocess.run(
            [sys.executable, "-m", "ckpt_tools.cli.main", "repair", str(folder), "--resume"],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        assert "completed the interrupted" in proc.stdout
        return "resume"
    action = ("resume", "rollback", "repair")[k % 3]
    if action == "rollback" and pending:
        before = file_bytes(folder)
        try:
            resume(str(folder), rollback=True)
        except TargetError as exc:  # a shard already rebuilt: its old bytes are not in the journal
            assert "already rebuilt" in str(exc) and "--resume" in str(exc), exc
            assert file_bytes(folder) == before, "a refused rollback changed the checkpoint"
            resume(str(folder))
            return "resume"
        assert file_bytes(folder) == old, "the rollback did not restore the old bytes"
        return "rollback"
    if action != "repair":
        resume(str(folder))  # with no journal: only removes a killed repair's temporary files
        return "resume"
    run(str(folder), scenario.job())
    return "repair"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name.split(" ")[0])
def test_kill_anywhere_then_next_run_completes(tmp_path, scenario):
    rng = random.Random(f"{SEED}-{scenario.name}")
    base = scenario.build(tmp_path / "base")
    old = file_bytes(base)
    original_view = library_view(base)

    reference = tmp_path / "reference"
    shutil.copytree(base, reference)
    steps = run(str(reference), scenario.job(), dry_run=True).steps
    start = time.monotonic()
    proc = spawn(scenario.argv, reference)
    assert proc.wait(timeout=60) == 0, proc.stderr.read().decode() if proc.stderr else ""
    assert time.monotonic() - start < 30
    new = file_bytes(reference)
    assert library_view(reference) == scenario.expected_view(original_view)  # data bytes equal the original's
    assert_index_agrees(reference)
    assert leftovers(reference) == []

    injected = points_for(steps, journal=scenario is SCENARIOS[0])
    state = {"pending": 0}

    def verify(k: int, point: str, folder: Path) -> None:
        pending = check_after_kill(folder, old, new, point)
        state["pending"] += pending
        assert_reported_not_acted_on(folder, pending)
        # One resume per scenario runs as its own process, on a pending journal; the others run in this process.
        ran = next_run(folder, scenario, k, pending and state["pending"] == 1, old, pending)
        state[ran] = state.get(ran, 0) + pending
        after = file_bytes(folder)
        if ran == "repair" or (pending and ran == "resume"):
            assert after == new, f"{point}: the next run did not complete the repair"
        else:
            assert after in (old, new), f"{point}: the next run left a mixed state"
        if after == old:  # rolled back, or killed before the journal existed: the repair still works
            run(str(folder), scenario.job())
            assert file_bytes(folder) == new
        assert library_view(folder) == scenario.expected_view(original_view)
        assert_index_agrees(folder)
        assert leftovers(folder) == [], f"{point}: left {leftovers(folder)}"
        shutil.rmtree(folder)

    # Injected kills: deterministic, so they run a few at a time; each is checked once it has died.
    for wave in range(0, len(injected), PARALLEL):
        running = []
        for k in range(wave, min(wave + PARALLEL, len(injected))):
            folder = tmp_path / f"case{k}"
            shutil.copytree(base, folder)
            running.append((k, injected[k], folder, spawn(scenario.argv, folder, crash_at=injected[k])))
        for k, point, folder, proc in running:
            code = proc.wait(timeout=60)
            assert code == -signal.SIGKILL, f"crash point {point} did not fire (exit {code}): {proc.stderr.read()}"
            verify(k, point, folder)
    assert state["pending"] >= len([p for p in injected if p.startswith("step")]) + ("done" in injected)
    if not any(step.kind == "rewrite" for step in steps):  # every pending state of these can be rolled back
        assert state.get("rollback", 0) >= 2, state

    # Random kills, one at a time so that the timing is the process's own.
    for r in range(RANDOM_KILLS):
        k = len(injected) + r
        folder = tmp_path / f"case{k}"
        shutil.copytree(base, folder)
        kill_at_random(spawn(scenario.argv, folder), folder, rng)
        verify(k, f"random{r}", folder)


def test_kill_during_rollback_then_resume_leaves_old_or_new(tmp_path):
    """A rollback is journaled like a repair: killed anywhere, the next `--resume` leaves every file entirely old
    (the rollback's journal had replaced the repair's) or entirely new (it had not), never a mix."""
    scenario = SCENARIOS[0]
    base = scenario.build(tmp_path / "base")
    old = file_bytes(base)
    reference = tmp_path / "reference"
    shutil.copytree(base, reference)
    run(str(reference), scenario.job())
    new = file_bytes(reference)
    # Killed after its header step: the rollback's steps are the index (still old: skipped), then the header.
    points = [
        "rollback:torn",
        "rollback:synced",
        "rollback:renamed",
        "step0:before",
        "step1:torn",
        "step1:after",
        "done",
    ]
    outcomes = set()
    for k, point in enumerate(points):
        folder = tmp_path / f"rollback{k}"
        shutil.copytree(base, folder)  # the journal names its folder: each case is killed where it is checked
        assert spawn(scenario.argv, folder, crash_at="step0:after").wait(timeout=60) == -signal.SIGKILL
        assert (folder / JOURNAL_NAME).exists()
        proc = spawn(("repair", "--rollback"), folder, crash_at=point)
        assert proc.wait(timeout=60) == -signal.SIGKILL, f"{point} did not fire: {proc.stderr.read()}"
        assert_reported_not_acted_on(folder, (folder / JOURNAL_NAME).exists())
        resume(str(folder))
        after = file_bytes(folder)
        assert after in (old, new), f"{point}: a mixed state after resuming a killed rollback"
        outcomes.add("old" if after == old else "new")
        assert leftovers(folder) == []
    assert outcomes == {"old", "new"}
