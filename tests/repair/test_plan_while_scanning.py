"""A repair planned while the value scan runs (`runner._PlanWhileScanning`): its plan and predicted verdict are the ones planning
after the scan gives (`runner.predict`: the after-state built from the scanned checkpoint and judged whole), and
the after-check equals a fresh `ckpt doctor` of the repaired files. The checkpoints here have value findings on the
renamed tensors, so statistics not carried over, or carried under the old names, would change the verdict."""

from __future__ import annotations

from ckpt_tools.pipeline import JudgementInProgress, analyze, doctor, judge
from ckpt_tools.repair import drop_orphans, fix_prefix, run, runner, scrub_nan
from ckpt_tools.repair.guard import resolve_local
from tests.corrupt import patch_tensor_bytes
from tests.repair_helpers import copy_of

MISNESTED = "defective/qwen35moe-nvfp4-misnested-vision"
SCALE = "model.layers.0.mlp.down_proj.weight_scale"
RENAME = ("model.layers.0.mlp.down_proj", "model.layers.0.mlp.down_moved")


def _spy(monkeypatch) -> list[runner._PlanWhileScanning]:
    """The planners-ahead the runner calls (a test that passes without the shortcut taken proves nothing)."""
    called: list[runner._PlanWhileScanning] = []
    original = runner._PlanWhileScanning.__call__

    def call(self, interim):
        called.append(self)
        return original(self, interim)

    monkeypatch.setattr(runner._PlanWhileScanning, "__call__", call)
    return called


def _planned_after_the_scan(folder, job):
    """The plan, steps and predicted report as the runner makes them without planning ahead."""
    analysis = analyze(str(folder))
    plan, steps = runner._plan(analysis, job, str(folder), resolve_local(str(folder)), writable=False)
    return plan, steps, runner.predict(analysis, plan, steps)


def _nan_scale_checkpoint(tmp_path):
    folder = copy_of("modelopt-llama-nvfp4", tmp_path)
    patch_tensor_bytes(folder, SCALE, {0: 0x7F, 5: 0xFF})  # NaN codes in a block scale the rename moves
    return folder


def test_planned_ahead_equals_planned_after_the_scan_on_renamed_value_findings(tmp_path, monkeypatch):
    folder = _nan_scale_checkpoint(tmp_path)
    job = fix_prefix.job([RENAME])
    plan, steps, sequential = _planned_after_the_scan(folder, job)
    moved = SCALE.replace(RENAME[0], RENAME[1])
    # The value finding follows the rename: the carried statistics are what the verdict rests on.
    assert any(moved in f.tensors for f in sequential.findings if f.code == "CK501")
    called = _spy(monkeypatch)
    dry = run(str(folder), job, dry_run=True, force=True)
    assert len(called) == 1 and called[0].planned is not None
    assert dry.plan == plan and dry.steps == steps
    assert dry.predicted is not None and dry.predicted.to_dict() == sequential.to_dict()
    real = run(str(folder), job, force=True)
    assert len(called) == 2
    assert real.after is not None and real.after.to_dict() == sequential.to_dict() == doctor(str(folder)).to_dict()


def test_planned_ahead_from_the_finding_equals_fresh_doctor(tmp_path, monkeypatch):
    folder = copy_of(MISNESTED, tmp_path)
    job = fix_prefix.job()
    _plan, _steps, sequential = _planned_after_the_scan(folder, job)
    assert "CK502" in {f.code for f in sequential.findings}  # a value finding in the after-state
    called = _spy(monkeypatch)
    real = run(str(folder), job)
    assert called and real.after is not None
    assert real.after.to_dict() == sequential.to_dict() == doctor(str(folder)).to_dict()


def test_drop_ahead_equals_planned_after_the_scan(tmp_path, monkeypatch):
    # Drops move every kept tensor's offsets in the rebuilt shard; the statistics of the kept ones carry over.
    folder = _nan_scale_checkpoint(tmp_path)
    job = drop_orphans.job(["model.layers.0.mlp.down_proj.input_scale"])
    _plan, _steps, sequential = _planned_after_the_scan(folder, job)
    assert "CK501" in {f.code for f in sequential.findings}
    called = _spy(monkeypatch)
    real = run(str(folder), job, force=True)
    assert called and real.after is not None
    assert real.after.to_dict() == sequential.to_dict() == doctor(str(folder)).to_dict()


def test_only_jobs_planned_from_header_findings_plan_ahead(tmp_path, monkeypatch):
    assert runner._plans_on_headers(fix_prefix.job()) and runner._plans_on_headers(drop_orphans.job())
    assert not runner._plans_on_headers(scrub_nan.job())  # its plan is the NaN bytes the scan finds
    folder = _nan_scale_checkpoint(tmp_path)
    called = _spy(monkeypatch)
    assert run(str(folder), scrub_nan.job()).after is not None and not called
    assert run(str(folder), fix_prefix.job([RENAME]), headers_only=True, force=True).after and not called  # no scan


def test_judging_in_two_steps_is_judge(tmp_path):
    folder = _nan_scale_checkpoint(tmp_path)
    analysis = analyze(str(folder))
    whole = judge(analysis.checkpoint, analysis.settings)
    later = JudgementInProgress.start(analysis.checkpoint, analysis.settings, values_later=True)
    assert later.deferred and "CK501" not in {f.code for f in later.interim().report.findings}
    assert later.finish(analysis.checkpoint).report.to_dict() == whole.report.to_dict() == analysis.report.to_dict()


def test_statistics_are_renamed_with_their_tensors(tmp_path):
    # The misnested vision tower has no measured tensor: the after-state holds the same statistics.
    folder = copy_of(MISNESTED, tmp_path)
    kept: list = []
    real = run(str(folder), fix_prefix.job(), dry_run=True, keep=kept.append)
    before, after = kept
    assert before.checkpoint.values is not None and after.checkpoint.values == before.checkpoint.values
    assert real.predicted is not None and "CK502" in {f.code for f in real.predicted.findings}
    # A rename of a measured tensor: new statistics, under the new name only.
    folder = _nan_scale_checkpoint(tmp_path / "nan")
    kept.clear()
    run(str(folder), fix_prefix.job([RENAME]), dry_run=True, keep=kept.append)
    before, after = kept
    assert after.checkpoint.values is not before.checkpoint.values
    moved = SCALE.replace(RENAME[0], RENAME[1])
    assert SCALE in before.checkpoint.values and SCALE not in after.checkpoint.values
    assert after.checkpoint.values.get(moved) is before.checkpoint.values.get(SCALE)
