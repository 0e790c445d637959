"""`fix`: every auto-fixable finding's repair, one job after another, in a safe order.

Order and why:
1. `scrub-nan`: byte patches inside tensors; names and offsets stay, so nothing later depends on it.
2. `fix-prefix`: header-only renames, so the rules that judge names (orphan scales against the ignore list) see the
   layout vLLM will see.
3. `drop-orphans`: rebuilds shards, so it runs last, planned on the final names.
Each job is its own journaled transaction, planned on the checkpoint as the previous one left it: a kill between two
jobs leaves a consistent checkpoint, and running `ckpt fix` again carries on.

One analysis for the whole run: the folder's lock is held from the first read to the last write, so the checkpoint
changes only through the jobs themselves, and each job plans on a state already known exactly instead of reading the
checkpoint again: the first on the analysis that chose the jobs, a later one on the state the previous one left (the
prediction of a header-only job, judged in memory with the value statistics carried over; the runner's own re-read
after byte patches).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from ..errors import CkptError
from ..pipeline import Analysis, JudgementInProgress, analyze
from ..report.model import Report
from ..rules.base import Finding
from . import drop_orphans, fix_prefix, scrub_nan
from .fsio import Writer
from .guard import LocalTarget, check_checkpoint, check_folder, resolve_local
from .journal import Lock, recover
from .runner import Job, RepairResult, _drop, _plans_on_headers, _PlanWhileScanning, refuse_pending, run

ORDER: tuple[Callable[[], Job], ...] = (scrub_nan.job, fix_prefix.job, drop_orphans.job)


@dataclass(frozen=True)
class FixAllResult:
    """What `ckpt fix` did: one result per job that ran, in order, and the findings no job repairs."""

    target: str
    dry_run: bool
    before: Report  # doctor on the checkpoint before the first job
    results: tuple[RepairResult, ...]
    not_repaired: tuple[Finding, ...]  # findings with a `fix` command that is not one of the jobs (reported only)

    @property
    def verdict(self) -> Report:
        """Doctor's verdict on the checkpoint as the run leaves it: the last job's after-check; on a dry run, the
        combined prediction of every plan (`combined_prediction`); the verdict before when no job ran."""
        if not self.results:
            return self.before
        if self.dry_run:
            return combined_prediction(self.before, self.results)
        last = self.results[-1]
        return last.after or last.before

    def to_dict(self) -> dict[str, Any]:
        left = self.verdict
        return {
            "target": self.target,
            "dry_run": self.dry_run,
            "repairs": [r.to_dict() for r in self.results],
            "not_repaired": [f.to_dict() for f in self.not_repaired],
            # what the run leaves (predicted, on a dry run): the findings no repair removed, with their severity
            "left": {"findings": [f.to_dict() for f in left.sorted_findings()], "summary": left.summary},
        }


def combined_prediction(before: Report, results: Iterable[RepairResult]) -> Report:
    """The end state of a dry run's whole chain. Each dry-run plan is made on the unchanged checkpoint (a later
    plan depends on bytes an earlier job has not written), so each prediction shows one job's effect: a finding is
    left when every job's prediction still has its rule (code and slug), and a finding a prediction adds is added.
    The jobs repair different defects (NaN bytes, names, orphan tensors), so their effects compose."""
    predictions = [r.predicted or r.before for r in results]
    kept = {(f.code, f.slug) for f in before.findings}
    for p in predictions:
        kept &= {(f.code, f.slug) for f in p.findings}
    left = [f for f in before.findings if (f.code, f.slug) in kept]
    seen = {(f.code, f.slug) for f in before.findings}
    for p in predictions:
        left.extend(f for f in p.findings if (f.code, f.slug) not in seen)
        seen |= {(f.code, f.slug) for f in p.findings}
    return replace(before, findings=tuple(left))


def fix_all(
    target: str,
    *,
    dry_run: bool = False,
    progress: bool | None = None,
    runtime: str | None = None,
    force: bool = False,
    keep: Callable[[Analysis], None] | None = None,
) -> FixAllResult:
    """Run every job whose finding is present and fixable, each on the checkpoint the previous one left (`keep`:
    as for `runner.run`). A dry run writes nothing, so it takes no lock (as a job's own dry run); a run that writes
    holds the folder's lock throughout."""
    local = resolve_local(target)  # refuse Hub targets before reading anything
    if dry_run:
        refuse_pending(local)
        return _fix_all(target, local, dry_run, progress, runtime, force, keep or _drop)
    with Lock(local.root):
        return _fix_all(target, local, dry_run, progress, runtime, force, keep or _drop)


def _fix_all(
    target: str,
    local: LocalTarget,
    dry_run: bool,
    progress: bool | None,
    runtime: str | None,
    force: bool,
    keep: Callable[[Analysis], None],
) -> FixAllResult:
    jobs = [make() for make in ORDER]
    first = _PlanFirst(jobs, target, local, writable=not dry_run)
    found = analyze(
        target, runtime=runtime, progress=progress, while_scanning=first
    )  # the full doctor, values included
    keep(found)
    check_checkpoint(found.checkpoint)  # unreadable shards hide findings: "nothing to do" would be a lie
    report = found.report
    present = fixable_slugs(report)
    state = found  # the checkpoint as the next job finds it (a dry run changes nothing: every plan is made on it)
    recovered: str | None = None
    results: list[RepairResult] = []
    for job in jobs:
        if job.slug not in present:
            continue
        if not results and not dry_run:
            state, recovered = _recover(target, local, found, runtime, progress, keep)
        made: list[Analysis] = []  # what the job hands to `keep`
        result = run(
            target,
            job,
            dry_run=dry_run,
            progress=progress,
            runtime=runtime,
            force=force,
            keep=_recording(made, keep),
            before=state,
            ahead=first.ahead if state is found and first.ahead is not None and first.ahead.job is job else None,
        )
        if not results and recovered is not None:
            result = replace(result, recovered=recovered)
        results.append(result)
        if result.after is not None:
            present = fixable_slugs(result.after, keep=present)
            state = _state_after(result, made, target, runtime, progress, keep)
    handled = {job.slug for job in jobs}
    others = tuple(f for f in report.sorted_findings() if f.fix and f.slug not in handled)
    return FixAllResult(target, dry_run, report, tuple(results), others)


class _PlanFirst:
    """`analyze(while_scanning=...)` for `ckpt fix`: while the value scan runs, plans the first job planned from header
    findings that the verdict so far calls for, as a job does on its own (`runner._PlanWhileScanning`). WHY that is the plan the
    job makes on the final analysis: as for one job (`runner._plans_on_headers`); the job uses it only when it plans
    on that analysis (`state is found`): a job ahead of it in `ORDER` that only the value rules call for (scrub-nan),
    or an interrupted repair completed first, changes the checkpoint, and the plan is left unused."""

    def __init__(self, jobs: list[Job], target: str, local: LocalTarget, *, writable: bool) -> None:
        self.jobs, self.target, self.local, self.writable = jobs, target, local, writable
        self.ahead: _PlanWhileScanning | None = None

    def __call__(self, judging: JudgementInProgress) -> None:
        interim = judging.interim()
        if interim.checkpoint.pending_repair is not None:
            return  # completed or cleaned up first, then read again (`_recover`)
        present = fixable_slugs(interim.report)
        job = next((j for j in self.jobs if j.slug in present and _plans_on_headers(j)), None)
        if job is None:
            return
        ahead = _PlanWhileScanning(job, self.target, self.local, writable=self.writable)
        try:
            ahead(judging)
        except CkptError:
            return  # the job refuses when it runs, in its turn (a job before it may still run)
        self.ahead = ahead


def _recover(
    target: str,
    local: LocalTarget,
    found: Analysis,
    runtime: str | None,
    progress: bool | None,
    keep: Callable[[Analysis], None],
) -> tuple[Analysis, str | None]:
    """Before the first write, under the lock: finish an interrupted repair (`recover`, as each job does when it
    locks the folder itself) and return the checkpoint as the first job finds it, with the interrupted job's name.

    WHY `found` is that checkpoint when it shows no pending repair: `recover` acts only on the journal and the
    temporary files a killed repair leaves, which the analysis lists (`Checkpoint.pending_repair`), and nothing but
    this process writes under the lock it has held since that analysis. Otherwise the state changed: read it again."""
    check_folder(local)
    recovered = recover(local.root, Writer())
    if found.checkpoint.pending_repair is None:
        return found, recovered
    again = analyze(target, runtime=runtime, progress=progress)
    keep(again)
    return again, recovered


def _state_after(
    result: RepairResult,
    made: list[Analysis],
    target: str,
    runtime: str | None,
    progress: bool | None,
    keep: Callable[[Analysis], None],
) -> Analysis:
    """The analysis of the checkpoint as a job that wrote left it: the one behind its after-check (`result.after`),
    which the job hands to `keep`: its prediction after renames and drops (exact: weights untouched, value
    statistics carried over), its re-read after byte patches."""
    for analysis in reversed(made):
        if analysis.report is result.after:
            return analysis
    again = analyze(target, runtime=runtime, progress=progress)  # not handed over: read the checkpoint again
    keep(again)
    return again


def _recording(made: list[Analysis], keep: Callable[[Analysis], None]) -> Callable[[Analysis], None]:
    def kept(analysis: Analysis) -> None:
        made.append(analysis)
        keep(analysis)

    return kept


def fixable_slugs(report: Report, keep: Iterable[str] = ()) -> set[str]:
    """Slugs of findings with a fix; slugs in `keep` stay when their rule did not run (a headers-only re-check)."""
    skipped = {s["slug"] for s in report.skipped}
    return {f.slug for f in report.findings if f.fix} | {s for s in keep if s in skipped}
