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

from ..pipeline import analyze
from ..report.model import Report
from ..rules.base import Finding
from . import drop_orphans, fix_prefix, scrub_nan
from .guard import check_checkpoint, resolve_local
from .runner import Job, RepairResult, refuse_pending, run

ORDER: tuple[Callable[[], Job], ...] = (scrub_nan.job, fix_prefix.job, drop_orphans.job)


def fix_all(
    target: str, *, dry_run: bool = False, progress: bool | None = None, runtime: str | None = None, force: bool = False
) -> tuple[list[RepairResult], list[Finding]]:
    """Run every job whose finding is present and fixable. Returns the results, and the findings whose `fix` command
    is not one of these jobs (reported, not touched)."""
    local = resolve_local(target)  # refuse Hub targets before reading anything
    if dry_run:
        refuse_pending(local)
    analysis = analyze(target, runtime=runtime)  # the full doctor, scale values included
    check_checkpoint(analysis.checkpoint)  # unreadable shards hide findings: "nothing to do" would be a lie
    report = analysis.report
    jobs = [make() for make in ORDER]
    present = fixable_slugs(report)
    results = []
    for job in jobs:
        if job.slug not in present:
            continue
        result = run(target, job, dry_run=dry_run, progress=progress, runtime=runtime, force=force)
        results.append(result)
        if result.after is not None:
            present = fixable_slugs(result.after, keep=present)
    handled = {job.slug for job in jobs}
    return results, [f for f in report.sorted_findings() if f.fix and f.slug not in handled]


def fixable_slugs(report: Report, keep: Iterable[str] = ()) -> set[str]:
    """Slugs of findings with a fix; slugs in `keep` stay when their rule did not run (a headers-only re-check)."""
    skipped = {s["slug"] for s in report.skipped}
    return {f.slug for f in report.findings if f.fix} | {s for s in keep if s in skipped}
