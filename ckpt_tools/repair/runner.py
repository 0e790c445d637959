"""Run one repair job on one checkpoint: resolve, lock, finish any interrupted repair, analyze (the full doctor),
plan, predict the after-state (doctor on the planned headers, in memory), refuse a repair that would add errors,
apply under the journal. The after-check is the prediction (weights untouched, value data carried over), except
after byte patches, whose scale values are read again. A job planned from header findings is planned, and its
after-state judged up to the value rules, while the analysis' value scan still runs (`_PlanWhileScanning`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from ..errors import TargetError, UsageError
from ..pipeline import Analysis, JudgementInProgress, analyze, rejudge
from ..report.model import Report
from ..rules.base import Finding, all_rules
from ._thread import InThread
from .edits import Plan
from .fsio import Writer
from .guard import LocalTarget, check_checkpoint, check_folder, check_plan, check_writable, resolve_local
from .journal import Lock, journal_path, journal_pieces, recover, run_journaled
from .steps import RewriteStep, Step, compile_plan


@dataclass(frozen=True)
class Job:
    """A repair: its command name, the finding slug it repairs, whether planning needs scale bytes, and the planner."""

    name: str
    slug: str
    needs_values: bool
    build: Callable[[Analysis, str], Plan]  # (analysis, target) -> plan


@dataclass(frozen=True, kw_only=True)
class RepairResult:
    """What one repair job did (or, on a dry run, would do) to one checkpoint, with doctor's verdicts around it."""

    job: str
    target: str
    plan: Plan
    steps: tuple[Step, ...]
    before: Report  # doctor on the checkpoint as the job found it
    dry_run: bool = False
    applied: bool = False
    bytes_written: int = 0
    seconds: float = 0.0
    copy_methods: tuple[str, ...] = ()
    recovered: str | None = None  # an interrupted repair completed before this one
    after: Report | None = None  # doctor after the job wrote (None: nothing was written)
    predicted: Report | None = None  # doctor on the planned headers, before anything is written
    forced: bool = False  # applied with --force although the prediction has more errors than before
    blocked: str | None = None  # dry run: why the repair itself could not run here (read-only files)

    @property
    def verdict(self) -> Report:
        """Doctor's verdict on the checkpoint as this job leaves it: the after-check once written, the prediction on
        a dry run, the verdict before when there was nothing to do."""
        return self.after or self.predicted or self.before

    @property
    def worse(self) -> bool:
        """The predicted after-state has more errors than the checkpoint has now."""
        return self.predicted is not None and self.predicted.summary["error"] > self.before.summary["error"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "target": self.target,
            "dry_run": self.dry_run,
            "applied": self.applied,
            "summary": self.plan.summary,
            "plan": {
                "lines": list(self.plan.lines),
                "details": dict(self.plan.details),
                "steps": [step_summary(s) for s in self.steps],
                "bytes_to_write": sum(s.bytes_to_write for s in self.steps),
            },
            "bytes_written": self.bytes_written,
            "seconds": round(self.seconds, 4),
            "copy_methods": list(self.copy_methods),
            "recovered": self.recovered,
            "before": report_summary(self.before),
            "after": report_summary(self.after) if self.after is not None else None,
            "predicted": report_summary(self.predicted) if self.predicted is not None else None,
            "worse": self.worse,
            "forced": self.forced,
            "blocked": self.blocked,
        }


def step_summary(step: Step) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": step.kind,
        "file": step.file,
        "note": step.note,
        "bytes_to_write": step.bytes_to_write,
    }
    if isinstance(step, RewriteStep):
        out["reason"] = step.reason
        out["bytes_copied"] = sum(c[2] for c in step.copies)
    return out


def report_summary(report: Report) -> dict[str, Any]:
    return {"summary": report.summary, "findings": [f"{f.code} {f.slug}" for f in report.sorted_findings()]}


def fixable_findings(analysis: Analysis, slug: str) -> list[Finding]:
    """Findings of `slug`; raises if there are some but the rule judged none of them safe to fix automatically."""
    found = [f for f in analysis.report.findings if f.slug == slug]
    fixable = [f for f in found if f.fix]
    if found and not fixable:
        raise TargetError(f"{found[0].code} {slug} is not automatically fixable here: {found[0].message}")
    return fixable


class _NoBar:
    """The progress bar of a repair that shows none (nothing to copy, or turned off): tqdm is not even imported."""

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: int = 1) -> None:
        return None


def _progress_bar(steps: tuple[Step, ...], progress: bool | None):
    total = sum(c[2] for s in steps if isinstance(s, RewriteStep) for c in s.copies)
    disable = (None if progress is None else not progress) if total else True
    if os.environ.get("CKPT_NO_PROGRESS"):
        disable = True
    if disable is True:
        return _NoBar()
    from ..read.progress import progress_bar

    return progress_bar(
        total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="rewrite", disable=disable, leave=False
    )


def _drop(analysis: Analysis) -> None:
    return None


def run(
    target: str,
    job: Job,
    *,
    dry_run: bool = False,
    progress: bool | None = None,
    runtime: str | None = None,
    force: bool = False,
    headers_only: bool = False,
    keep: Callable[[Analysis], None] | None = None,
    before: Analysis | None = None,
    ahead: _PlanWhileScanning | None = None,
) -> RepairResult:
    """Run `job` on `target`. Raises `TargetError` / `UsageError` (exit 2) when it must refuse; then nothing changed.
    A repair whose predicted after-state has more errors than the checkpoint has now refuses unless `force`; a dry
    run reports the prediction (`result.worse`) and changes nothing. `headers_only` skips the value scan (the
    verdicts then list the value rules as skipped, as `ckpt doctor --headers-only` does). `keep`, when given,
    receives every analysis the job made (the checkpoint as found, as predicted, and as read again after byte patches)
    instead of their being freed on return: the CLI leaves them to process exit (`cli.app.keep_until_exit`).
    `before`: the analysis of `target` as it is now, made by a caller that holds the folder's `Lock` for the whole
    job and ran `recover` under it first (`fix_all`, which chains jobs): the job plans on it instead of locking,
    recovering and analyzing itself; the state a written job leaves is the analysis whose report is `after`, handed
    to `keep`. `ahead`, with `before`: this job planned while `before`'s value scan ran (`analyze(while_scanning=ahead)`)."""
    keep = keep or _drop
    if headers_only and job.needs_values:
        raise UsageError(f"{job.name} reads scale values; --headers-only cannot apply")
    local = resolve_local(target)
    # The repair is planned, and its after-state judged up to the value rules, while the value scan still runs.
    if before is None:
        ahead = _PlanWhileScanning(job, target, local, writable=not dry_run) if _plans_on_headers(job) else None
    if dry_run:
        if before is None:
            refuse_pending(local)
        analysis = before or analyze(
            target, runtime=runtime, progress=progress, headers_only=headers_only, while_scanning=ahead
        )
        keep(analysis)
        plan, steps, predicted = _plan_and_predict(analysis, job, target, local, ahead, keep, writable=False)
        blocked = None
        if steps:
            try:
                check_writable(analysis.checkpoint, plan, local)
            except TargetError as exc:
                blocked = str(exc)
        return RepairResult(
            job=job.name,
            target=target,
            plan=plan,
            steps=steps,
            before=analysis.report,
            dry_run=True,
            predicted=predicted,
            blocked=blocked,
        )

    if before is None:
        check_folder(local)
    with Lock(local.root) if before is None else nullcontext():
        recovered = recover(local.root, Writer()) if before is None else None
        analysis = before or analyze(
            target, runtime=runtime, progress=progress, headers_only=headers_only, while_scanning=ahead
        )
        keep(analysis)
        plan, steps, predicted = _plan_and_predict(analysis, job, target, local, ahead, keep)
        if not steps:
            return RepairResult(
                job=job.name, target=target, plan=plan, steps=steps, before=analysis.report, recovered=recovered
            )
        if not force:
            refuse_worse(job.name, analysis.report, predicted)
        with _progress_bar(steps, progress) as bar:
            writer = Writer(progress=bar.update)
            start = time.perf_counter()
            run_journaled(local.root, job.name, steps, writer, ahead.journal if ahead is not None else None)
            seconds = time.perf_counter() - start
    # Renames and drops leave every byte the value rules read untouched: the prediction is the after-state. Byte
    # patches change scale values, which are read again.
    patched = any(e.patches for e in plan.edits.values())
    after = predicted
    if patched:
        reread = analyze(target, runtime=runtime, progress=progress, headers_only=headers_only)
        keep(reread)
        after = reread.report
    worse = predicted is not None and predicted.summary["error"] > analysis.report.summary["error"]
    return RepairResult(
        job=job.name,
        target=target,
        plan=plan,
        steps=steps,
        before=analysis.report,
        applied=True,
        bytes_written=writer.written,
        seconds=seconds,
        copy_methods=tuple(sorted(writer.copied_with)),
        recovered=recovered,
        after=after,
        predicted=predicted,
        forced=force and worse,
    )


def predict(
    analysis: Analysis, plan: Plan, steps: tuple[Step, ...], keep: Callable[[Analysis], None] | None = None
) -> Report:
    """Doctor's verdict on the checkpoint the (non-empty) steps leave, judged in memory like the before-state
    (`keep` receives the after-state's analysis)."""
    from .predict import after_checkpoint

    after = rejudge(analysis, after_checkpoint(analysis.checkpoint, plan, steps))  # paused there
    if keep is not None:
        keep(after)
    return after.report


def _plans_on_headers(job: Job) -> bool:
    """Whether `job` can be planned on the verdict so far (`JudgementInProgress.interim`, while the value scan runs). WHY its plan
    is then the same: a job plans from the analysis' checkpoint and the findings of its slug; the checkpoint so far is
    the final one but for the value statistics, which a job that does not need values never reads, and a rule that
    reads no values has all its findings in the verdict so far."""
    return not job.needs_values and not any(r.needs_values for r in all_rules() if r.slug == job.slug)


class _PlanWhileScanning:
    """`analyze(while_scanning=...)` for a repair: plans it on the verdict so far and starts judging its after-state
    (detection and the header rules) while the value scan still runs on the other core. The value rules of the
    after-state wait for the before-state's statistics, carried over (`_plan_and_predict`)."""

    def __init__(self, job: Job, target: str, local: LocalTarget, *, writable: bool) -> None:
        self.job, self.target, self.local, self.writable = job, target, local, writable
        self.planned: tuple[Plan, tuple[Step, ...], JudgementInProgress | None] | None = None
        self._journal: InThread[list[bytes]] | None = None  # the steps' journal, encoded meanwhile (if it writes)

    @property
    def journal(self) -> bytes | None:
        """The steps' journal (`encode_journal`), once its pieces (made on a thread of its own) are done, joined here;
        None when none was encoded."""
        return b"".join(self._journal.result()) if self._journal is not None else None

    def __call__(self, judging: JudgementInProgress) -> None:
        from .predict import after_checkpoint

        interim = judging.interim()
        plan, steps = _plan(interim, self.job, self.target, self.local, writable=self.writable)
        after = None
        if steps:
            after = JudgementInProgress.start(
                after_checkpoint(interim.checkpoint, plan, steps),
                interim.settings,
                values_later=True,
            )
        self.planned = (plan, steps, after)
        if steps and self.writable:
            # Mostly hashing tens of megabytes, which runs without the interpreter lock: on the core the value scan
            # leaves, while this process reads and judges the scan's values.
            name, root = self.job.name, self.local.root
            self._journal = InThread(lambda: journal_pieces(name, root, steps))


def _plan_and_predict(
    analysis: Analysis,
    job: Job,
    target: str,
    local: LocalTarget,
    ahead: _PlanWhileScanning | None,
    keep: Callable[[Analysis], None],
    writable: bool = True,
) -> tuple[Plan, tuple[Step, ...], Report | None]:
    """The plan, its steps and the predicted verdict (None without steps): made ahead while the scan ran, or now."""
    if ahead is None or ahead.planned is None:  # no scan ran (headers only), or the job needs the values
        plan, steps = _plan(analysis, job, target, local, writable)
        return plan, steps, predict(analysis, plan, steps, keep) if steps else None
    from .predict import with_scanned_values

    plan, steps, judging = ahead.planned
    if judging is None:
        return plan, steps, None
    after = judging.finish(with_scanned_values(judging.ckpt, analysis.checkpoint, plan))
    keep(after)
    return plan, steps, after.report


def refuse_worse(job: str, before: Report, predicted: Report | None) -> None:
    """A repair must not make the checkpoint worse silently: more errors after than before refuses (exit 2)."""
    if predicted is None or predicted.summary["error"] <= before.summary["error"]:
        return
    had = {(f.code, f.slug) for f in before.findings if f.severity == "error"}
    new = sorted(
        {f"{f.code} {f.slug}" for f in predicted.findings if f.severity == "error" and (f.code, f.slug) not in had}
    )
    raise TargetError(
        f"{job} would make the checkpoint worse: {before.summary['error']} -> "
        f"{predicted.summary['error']} error(s)"
        + (f" (new: {', '.join(new)})" if new else "")
        + "; nothing was changed (--dry-run shows the predicted state, --force applies it anyway)"
    )


def refuse_pending(local: LocalTarget) -> None:
    """A dry run writes nothing, so it cannot plan on top of an interrupted repair."""
    if os.path.lexists(journal_path(local.root)):
        raise TargetError(
            f"{local.root}: an interrupted repair is pending; complete it with `ckpt repair --resume "
            f"{local.root}` (or roll it back with `--rollback`) first"
        )


def _plan(
    analysis: Analysis, job: Job, target: str, local: LocalTarget, writable: bool = True
) -> tuple[Plan, tuple[Step, ...]]:
    check_checkpoint(analysis.checkpoint)
    plan = job.build(analysis, target)
    if plan.empty:
        return plan, ()
    check_plan(analysis.checkpoint, plan, local, writable=writable)
    return plan, compile_plan(plan, analysis.checkpoint, local.root)
