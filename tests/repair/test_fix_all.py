"""ckpt fix: every automatic repair the doctor finds, in order, each planned on the state the previous one left."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from ckpt_tools.pipeline import doctor
from tests.corrupt import patch_tensor_bytes
from tests.repair_helpers import (
    INDEX,
    MISNESTED_FIXTURE,
    add_tensors,
    copy_of,
    file_bytes,
    leftovers,
    library_view,
    make_sharded,
    renamed_view,
    run_cli,
)

NAN_SCALE = "model.language_model.layers.0.linear_attn.out_proj.weight_scale"


def test_fix_applies_scrub_then_rename(tmp_path, capsys):
    folder = make_sharded(copy_of(MISNESTED_FIXTURE, tmp_path))
    patch_tensor_bytes(folder, NAN_SCALE, {0: 0x7F, 3: 0xFF})
    view = library_view(folder)
    slugs = {f.slug for f in doctor(str(folder)).findings}
    assert {"misnested-prefix", "nan-fp8-scale"} <= slugs

    code, out, err = run_cli(["fix", folder, "--format", "json", "--fail-on", "error"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert [r["job"] for r in data["repairs"]] == ["scrub-nan", "fix-prefix"]
    assert all(r["applied"] for r in data["repairs"])
    assert not {f.slug for f in doctor(str(folder)).findings} & {"misnested-prefix", "nan-fp8-scale"}

    expected = renamed_view(view, "model.language_model.visual.", "model.visual.")
    scale = bytearray(expected[NAN_SCALE][3])
    scale[0] = scale[3] = 0x7E
    expected[NAN_SCALE] = (*expected[NAN_SCALE][:3], bytes(scale))
    assert library_view(folder) == expected
    assert leftovers(folder) == []


def test_fix_dry_run_lists_both_plans_and_changes_nothing(tmp_path, capsys):
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    patch_tensor_bytes(folder, NAN_SCALE, {1: 0x7F})
    before = file_bytes(folder)
    code, out, err = run_cli(["fix", folder, "--dry-run"], capsys)
    assert code == 0, err
    assert "ckpt scrub-nan" in out and "ckpt fix-prefix" in out and out.count("nothing was changed") == 2
    assert file_bytes(folder) == before


@pytest.mark.parametrize(
    "command, fixture",
    [
        ("fix", "modelopt-qwen35moe-nvfp4"),
        ("fix", "llmc-qwen3moe-nvfp4-sharded"),
        ("fix-prefix", "llmc-qwen35moe-nvfp4"),
        ("scrub-nan", "modelopt-llama-nvfp4"),
        ("scrub-nan", "llmc-qwen3moe-nvfp4"),
    ],
)
def test_clean_checkpoint_is_left_alone(tmp_path, capsys, command, fixture):
    folder = copy_of(fixture, tmp_path)
    before = file_bytes(folder)
    code, out, _ = run_cli([command, folder], capsys)
    assert code == 0 and "nothing to do" in out
    assert file_bytes(folder) == before  # hidden files included: no journal, lock or temporary file either


def test_fix_exit_code_is_its_own_after_verdict(tmp_path, capsys, monkeypatch):
    """`--fail-on` judges the verdict the last repair left (CK502 stays: a warning), with no extra doctor run."""
    import ckpt_tools.pipeline

    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    patch_tensor_bytes(folder, NAN_SCALE, {0: 0x7F})

    def no_second_look(*args, **kwargs):
        raise AssertionError("the fix command analyzed the checkpoint again")

    monkeypatch.setattr(ckpt_tools.pipeline, "analyze", no_second_look)  # fix_all and the runner hold their own
    code, out, err = run_cli(["fix", folder, "--format", "json", "--fail-on", "warning"], capsys)
    assert code == 1, err
    last = json.loads(out)["repairs"][-1]
    assert last["job"] == "fix-prefix"
    assert last["after"]["findings"] == ["CK502 fused-scale-mismatch"]
    code, _out, err = run_cli(["fix", folder, "--fail-on", "error"], capsys)
    assert code == 0 and "nothing to do" in _out, err


# ---- one analysis for the whole run -------------------------------------------------------------------------------
# `ckpt fix` analyzes the checkpoint once and plans each later job on the state the previous one left (its
# prediction, or the re-read after byte patches). `old_fix_all` is the run it replaces, kept here as the reference:
# an analysis to choose the jobs, then each job on its own (`runner.run` locks, recovers and analyzes again).

ORPHAN_IN_TOWER = ("model.language_model.visual.blocks.0.attn.proj.input_scale", "F32", [], b"\x00\x00\x80\x3f")
ORPHAN_ON_HEAD = ("lm_head.input_scale", "F32", [], b"\x00\x00\x00\x40")


def old_fix_all(target, dry_run=False):
    from ckpt_tools.pipeline import analyze
    from ckpt_tools.repair.fix_all import ORDER, FixAllResult, fixable_slugs
    from ckpt_tools.repair.guard import resolve_local
    from ckpt_tools.repair.runner import refuse_pending, run

    if dry_run:
        refuse_pending(resolve_local(target))
    report = analyze(target).report
    jobs = [make() for make in ORDER]
    present = fixable_slugs(report)
    results = []
    for job in jobs:
        if job.slug in present:
            results.append(run(target, job, dry_run=dry_run))
            if results[-1].after is not None:
                present = fixable_slugs(results[-1].after, keep=present)
    others = tuple(f for f in report.sorted_findings() if f.fix and f.slug not in {j.slug for j in jobs})
    return FixAllResult(target, dry_run, report, tuple(results), others)


@pytest.fixture
def reads(monkeypatch):
    """How many times the checkpoint was loaded and its scale values scanned, by anyone, in this process."""
    import ckpt_tools.pipeline as pipeline

    counts = {"loads": 0, "scans": 0}
    load, scan = pipeline.load_checkpoint, pipeline.BackgroundScan

    def counted_load(*args, **kwargs):
        counts["loads"] += 1
        return load(*args, **kwargs)

    def counted_scan(*args, **kwargs):
        counts["scans"] += 1
        return scan(*args, **kwargs)

    monkeypatch.setattr(pipeline, "load_checkpoint", counted_load)
    monkeypatch.setattr(pipeline, "BackgroundScan", counted_scan)
    return counts


def chained(tmp_path):
    """A sharded checkpoint with a finding for every job: a NaN scale, the mis-nested vision tower, and two orphan
    scales, one of them inside the tower (drop-orphans must drop it under the name fix-prefix gives it)."""
    folder = make_sharded(copy_of(MISNESTED_FIXTURE, tmp_path))
    patch_tensor_bytes(folder, NAN_SCALE, {0: 0x7F, 3: 0xFF})
    add_tensors(folder, [ORPHAN_IN_TOWER], beside="model.language_model.visual.blocks.0.attn.proj.weight")
    add_tensors(folder, [ORPHAN_ON_HEAD], beside="lm_head.weight")
    return folder


def printed(result):
    """What `ckpt fix` prints (text and --json), but for the seconds each write took."""
    from ckpt_tools.repair.render import render_fix_all

    data = result.to_dict()
    for r in data["repairs"]:
        r.pop("seconds")
    return data, re.sub(r" in \d+\.\d+ s", " in (s)", render_fix_all(result))


def same_as_before(tmp_path, folder, reads, *, dry_run=False):
    """Run `fix_all` on `folder`, then the reference on `folder` as it was (the journal names its folder: the same path
    writes the same bytes); both print and write the same. Returns the new run, its (loads, scans) and the
    reference's."""
    from ckpt_tools.repair.fix_all import fix_all

    pristine = tmp_path / "pristine"
    shutil.copytree(folder, pristine)
    new = fix_all(str(folder), dry_run=dry_run)
    mine = (reads["loads"], reads["scans"])
    left = file_bytes(folder)
    shutil.rmtree(folder)
    shutil.copytree(pristine, folder)
    old = old_fix_all(str(folder), dry_run=dry_run)
    theirs = (reads["loads"] - mine[0], reads["scans"] - mine[1])
    assert printed(new) == printed(old)
    assert new.verdict.to_dict() == old.verdict.to_dict()
    assert left == file_bytes(folder)
    return new, mine, theirs


def test_one_job_fix_analyzes_once(tmp_path, reads):
    folder = make_sharded(copy_of(MISNESTED_FIXTURE, tmp_path))
    new, mine, theirs = same_as_before(tmp_path, folder, reads)
    assert [r.job for r in new.results] == ["fix-prefix"] and new.results[0].applied
    assert mine == (1, 1)  # the analysis that chose the job is the one it planned on
    assert theirs == (2, 2)


def test_chained_fix_reads_only_after_byte_patches(tmp_path, reads):
    folder = chained(tmp_path)
    assert {"nan-fp8-scale", "misnested-prefix", "orphan-scale"} <= {f.slug for f in doctor(str(folder)).findings}
    reads.update(loads=0, scans=0)
    new, mine, theirs = same_as_before(tmp_path, folder, reads)
    assert [(r.job, r.applied) for r in new.results] == [
        ("scrub-nan", True),
        ("fix-prefix", True),
        ("drop-orphans", True),
    ]
    dropped = new.results[2].plan.details["orphans"]
    assert dropped == sorted(["model.visual.blocks.0.attn.proj.input_scale", ORPHAN_ON_HEAD[0]])  # the renamed one
    # The analysis that chose the jobs, and scrub-nan's re-read of the patched scales; fix-prefix planned on that
    # re-read, drop-orphans on fix-prefix's prediction.
    assert mine == (2, 2)
    assert theirs == (5, 5)
    assert not {"nan-fp8-scale", "misnested-prefix", "orphan-scale"} & {f.slug for f in doctor(str(folder)).findings}


def test_chained_dry_run_analyzes_once(tmp_path, reads):
    folder = chained(tmp_path)
    before = file_bytes(folder)
    new, mine, theirs = same_as_before(tmp_path, folder, reads, dry_run=True)
    assert [r.job for r in new.results] == ["scrub-nan", "fix-prefix", "drop-orphans"]
    assert mine == (1, 1) and theirs == (4, 4)
    assert file_bytes(folder) == before


def test_header_only_prediction_is_the_checkpoint_the_next_job_reads(tmp_path):
    """WHY a later job may plan on a header-only job's prediction: it is the checkpoint loading the written files
    gives, field by field (shards with their header lengths and tensors, file sizes, index), values carried."""
    import dataclasses

    from ckpt_tools.pipeline import analyze
    from ckpt_tools.repair import fix_prefix, run

    folder = chained(tmp_path)
    predicted = []
    run(str(folder), fix_prefix.job(), keep=predicted.append)
    fresh = analyze(str(folder)).checkpoint
    after = next(a for a in predicted if a.checkpoint.index.weight_map != predicted[0].checkpoint.index.weight_map)
    for f in dataclasses.fields(fresh):
        if f.name != "values":
            assert getattr(after.checkpoint, f.name) == getattr(fresh, f.name), f.name
    assert dict(after.checkpoint.values.items()) == dict(fresh.values.items())


def test_recovered_repair_is_analyzed_again(tmp_path, reads):
    """An interrupted repair completed under the lock changed the checkpoint: the first job plans on it read again,
    and reports what it completed, as the job alone does."""
    from tests.repair.test_refusals import pending_journal

    folder = make_sharded(copy_of(MISNESTED_FIXTURE, tmp_path))
    patch_tensor_bytes(folder, NAN_SCALE, {0: 0x7F})
    pending_journal(folder)  # a fix-prefix killed right after writing its journal
    reads.update(loads=0, scans=0)
    new, mine, _theirs = same_as_before(tmp_path, folder, reads)
    assert new.results[0].recovered == "fix-prefix"
    assert "misnested-prefix" in {f.slug for f in new.before.findings}  # as found: the journal not yet replayed
    assert [r.job for r in new.results] == ["scrub-nan"]  # the journal had renamed the tower
    assert "misnested-prefix" not in {f.slug for f in new.results[0].before.findings}
    assert mine == (3, 3)  # as found, after the recovery, scrub-nan's re-read


def test_leftover_temporary_file_is_analyzed_again(tmp_path, reads):
    """A killed repair's temporary file is removed by the recovery, which the analysis as found still lists (CK109):
    the job plans on the checkpoint without it."""
    from ckpt_tools.read.repair_state import temp_name

    folder = make_sharded(copy_of(MISNESTED_FIXTURE, tmp_path))
    (folder / temp_name("model-00001-of-00003.safetensors")).write_bytes(b"half a shard")
    new, mine, _theirs = same_as_before(tmp_path, folder, reads)
    assert "CK109" in {f.code for f in new.before.findings}
    assert "CK109" not in {f.code for f in new.results[0].before.findings}
    assert leftovers(folder) == []
    assert mine == (2, 2)


def test_every_job_runs_under_the_lock_fix_holds(tmp_path, monkeypatch):
    from ckpt_tools.errors import TargetError
    from ckpt_tools.repair import fix_all as module
    from ckpt_tools.repair.journal import Lock

    folder = chained(tmp_path)
    real_run, ran = module.run, []

    def locked_run(target, job, **kwargs):
        with pytest.raises(TargetError, match="a repair is already running"), Lock(folder):
            pass
        ran.append(job.name)
        return real_run(target, job, **kwargs)

    monkeypatch.setattr(module, "run", locked_run)
    module.fix_all(str(folder))
    assert ran == ["scrub-nan", "fix-prefix", "drop-orphans"]
    with Lock(folder):  # released at the end
        pass


def spied_runs(monkeypatch):
    """job name -> whether `fix_all` handed it a plan made while the analysis' value scan ran."""
    from ckpt_tools.repair import fix_all as module

    real_run, given = module.run, {}

    def spy(target, job, **kwargs):
        given[job.name] = kwargs.get("ahead") is not None
        return real_run(target, job, **kwargs)

    monkeypatch.setattr(module, "run", spy)
    return given


@pytest.mark.parametrize("dry_run", [False, True])
def test_first_job_planned_while_the_scan_ran(tmp_path, monkeypatch, reads, dry_run):
    """A header-planned job that plans on the analysis as found gets the plan made meanwhile (as `ckpt fix-prefix`
    does); one that runs after byte patches plans on their re-read. A dry run plans every job on the analysis as
    found."""
    given = spied_runs(monkeypatch)
    folder = make_sharded(copy_of(MISNESTED_FIXTURE, tmp_path / "one"))
    same_as_before(tmp_path / "one", folder, reads, dry_run=dry_run)
    assert given == {"fix-prefix": True}
    given.clear()
    folder = chained(tmp_path)
    same_as_before(tmp_path, folder, reads, dry_run=dry_run)
    assert given == {"scrub-nan": False, "fix-prefix": dry_run, "drop-orphans": False}


def test_a_later_job_refuses_in_its_turn(tmp_path):
    """fix-prefix's plan ahead refuses (the index, which only it writes, is read-only): scrub-nan still runs first
    and writes, then fix-prefix refuses, as when each job planned on its own."""
    from ckpt_tools.errors import TargetError
    from ckpt_tools.repair.fix_all import fix_all

    folder = make_sharded(copy_of(MISNESTED_FIXTURE, tmp_path))
    patch_tensor_bytes(folder, NAN_SCALE, {0: 0x7F})
    pristine = tmp_path / "pristine"
    shutil.copytree(folder, pristine)
    outcomes = []
    for fix in (fix_all, old_fix_all):
        (folder / INDEX).chmod(0o444)
        with pytest.raises(TargetError) as refused:
            fix(str(folder))
        outcomes.append((str(refused.value), file_bytes(folder)))
        shutil.rmtree(folder)
        shutil.copytree(pristine, folder)
    assert f"{INDEX} is read-only" in outcomes[0][0] and outcomes[0] == outcomes[1]
    assert outcomes[0][1] != file_bytes(pristine)  # scrub-nan wrote first


def test_fix_killed_anywhere_then_fix_again_completes(tmp_path):
    """`ckpt fix` SIGKILLed inside its first job (injected: the journal written, a patch cut short, the patches made,
    the journal about to go) or at a random instant of the chain: the checkpoint reads as consistent (a pending
    journal is reported, CK109), and `ckpt fix` again, under its own lock, completes whatever was interrupted and
    ends with the bytes of a run never killed."""
    import random
    import signal
    import subprocess
    import sys
    import time

    from ckpt_tools.pipeline import analyze
    from ckpt_tools.repair.fix_all import fix_all
    from ckpt_tools.repair.journal import JOURNAL_NAME
    from tests.repair.test_crash import REPO

    base = chained(tmp_path / "base")
    reference = tmp_path / "reference"
    shutil.copytree(base, reference)
    fix_all(str(reference))
    done, done_view = file_bytes(reference), library_view(reference)
    rng = random.Random("ckpt-fix-kills")
    cases = ["journal:renamed", "step0:partial", "step0:after", "done", *(None for _ in range(3))]
    for k, point in enumerate(cases):
        folder = tmp_path / f"case{k}"
        shutil.copytree(base, folder)
        env = {**os.environ, "CKPT_NO_PROGRESS": "1", "PYTHONPATH": str(REPO)}
        env.pop("CKPT_REPAIR_CRASH_AT", None)
        if point:
            env["CKPT_REPAIR_CRASH_AT"] = point
        proc = subprocess.Popen(
            [sys.executable, "-m", "ckpt_tools.cli.main", "fix", str(folder)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        if point:
            assert proc.wait(timeout=60) == -signal.SIGKILL, f"{point} did not fire: {proc.stderr.read()}"
        else:
            time.sleep(rng.uniform(0.2, 1.5))
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
        pending = (folder / JOURNAL_NAME).exists()
        assert pending or point is None, point
        report = analyze(str(folder), headers_only=True).report
        assert ("CK109" in {f.code for f in report.findings}) == pending
        if not pending:
            library_view(folder)  # every shard loads: each job is whole or not started
        fix_all(str(folder))
        assert file_bytes(folder) == done, point
        assert library_view(folder) == done_view and leftovers(folder) == []
        shutil.rmtree(folder)
