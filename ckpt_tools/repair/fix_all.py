"""`fix`: every auto-fixable finding's repair, one job after another, in a safe order.

Order and why:
1. `scrub-nan`: byte patches inside tensors; names and offsets stay, so nothing later depends on it.
2. `fix-prefix`: header-only renames, so the rules that judge names (orphan scales against the ignore list) see the
   layout vLLM will see.
3. `drop-orphans`: rebuilds shards, so it runs last, planned on the final names.
Each job is its own journaled transaction, planned on the checkpoint as the previous one left it: a kill between two
jobs leaves a consistent checkpoint, and running `ckpt fix` again carries on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..pipeline import Analysis, analyze
from ..report.model import Report
from ..rules.base import Finding
from . import drop_orphans, fix_prefix, scrub_nan
from .guard import check_checkpoint, resolve_local
from .runner import Job, RepairResult, refuse_pending, run

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
        """Doctor's verdict on the checkpoint as the run leaves it: the last job's own (its after-check, or on a
        dry run the state now: each dry-run plan is made on the unchanged checkpoint, so no prediction covers them
        all)."""
        if not self.results:
            return self.before
        last = self.results[-1]
        return last.after or last.before

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "dry_run": self.dry_run,
            "repairs": [r.to_dict() for r in self.results],
            "not_repaired": [f.to_dict() for f in self.not_repaired],
        }


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
    as for `runner.run`)."""
    local = resolve_local(target)  # refuse Hub targets before reading anything
    if dry_run:
        refuse_pending(local)
    analysis = analyze(target, runtime=runtime)  # the full doctor, scale values included
    if keep is not None:
        keep(analysis)
    check_checkpoint(analysis.checkpoint)  # unreadable shards hide findings: "nothing to do" would be a lie
    report = analysis.report
    jobs = [make() for make in ORDER]
    present = fixable_slugs(report)
    results = []
    for job in jobs:
        if job.slug not in present:
            continue
        result = run(target, job, dry_run=dry_run, progress=progress, runtime=runtime, force=force, keep=keep)
        results.append(result)
        if result.after is not None:
            present = fixable_slugs(result.after, keep=present)
    handled = {job.slug for job in jobs}
    others = tuple(f for f in report.sorted_findings() if f.fix and f.slug not in handled)
    return FixAllResult(target, dry_run, report, tuple(results), others)


def fixable_slugs(report: Report, keep: Iterable[str] = ()) -> set[str]:
    """Slugs of findings with a fix; slugs in `keep` stay when their rule did not run (a headers-only re-check)."""
    skipped = {s["slug"] for s in report.skipped}
    return {f.slug for f in report.findings if f.fix} | {s for s in keep if s in skipped}
