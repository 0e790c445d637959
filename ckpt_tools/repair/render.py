"""Text view of repair results: the plan per file, what was written, and doctor's verdict before and after."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..report.model import Report
from .runner import RepairResult
from .steps import RewriteStep, Step

if TYPE_CHECKING:  # `ckpt fix` only: the other repairs' output imports neither `fix_all` nor the scrub's reader
    from .fix_all import FixAllResult

SHOWN_LINES = 20
KIND_LABEL = {"header": "header in place", "patch": "bytes in place", "index": "index replaced"}


def _label(step: Step) -> str:
    if isinstance(step, RewriteStep):
        return f"rewrite ({step.reason})"
    return KIND_LABEL[step.kind]


def verdict(report: Report) -> str:
    s = report.summary
    codes = "  ".join(f"{f.code} {f.slug}" for f in report.sorted_findings())
    return f"{s['error']} error(s), {s['warning']} warning(s), {s['info']} info" + (f"   {codes}" if codes else "")


def render_result(result: RepairResult) -> str:
    out = [f"ckpt {result.job} {result.target}" + (" --dry-run" if result.dry_run else "")]
    if result.recovered:
        out.append(f"completed first: the interrupted `{result.recovered}` repair left in the journal")
    if not result.steps:
        out.append(f"nothing to do: {result.plan.summary}")
        out.append(f"doctor: {verdict(result.before)}")
        return "\n".join(out) + "\n"
    out.append(f"plan: {result.plan.summary}")
    lines = result.plan.lines
    out += [f"  {line}" for line in lines[:SHOWN_LINES]]
    if len(lines) > SHOWN_LINES:
        out.append(f"  (+{len(lines) - SHOWN_LINES} more; --format json lists all)")
    width = max(len(s.file) for s in result.steps)
    label_width = max(len(_label(s)) for s in result.steps)
    note_width = max(len(s.note) for s in result.steps)
    for step in result.steps:
        extra = ""
        if isinstance(step, RewriteStep):
            extra = f" ({sum(c[2] for c in step.copies):,} B of tensor data copied unchanged)"
        out.append(
            f"  {step.file:<{width}}  {_label(step):<{label_width}}  {step.note:<{note_width}}  "
            f"{step.bytes_to_write:>12,} B{extra}"
        )
    total = sum(s.bytes_to_write for s in result.steps)
    if result.dry_run:
        out.append(f"would write {total:,} B (plus the journal); dry run: nothing was changed")
        out.append(f"doctor now:   {verdict(result.before)}")
        if result.predicted is not None:
            out.append(f"doctor after: {verdict(result.predicted)}   (predicted from the planned headers)")
        if result.worse:
            out.append("the repair would refuse: the predicted state has more errors (--force applies it anyway)")
        if result.blocked:
            out.append(f"the repair cannot run here as it is: {result.blocked}")
        return "\n".join(out) + "\n"
    files = len({s.file for s in result.steps})
    how = ""
    if result.copy_methods:
        how = f", data copied with {', '.join(result.copy_methods)}"
    elif all(s.kind in ("header", "index") for s in result.steps):
        how = ", weight bytes untouched"
    out.append(
        f"done: {result.bytes_written:,} B written (journal included) to {files} file(s) in {result.seconds:.3f} s{how}"
    )
    out.append(f"doctor before: {verdict(result.before)}")
    if result.after is not None:
        out.append(f"doctor after:  {verdict(result.after)}")
    if result.forced:
        out.append("applied with --force although it adds errors")
    return "\n".join(out) + "\n"


def render_fix_all(fixed: FixAllResult) -> str:
    """`ckpt fix`: its own first line, each job's block, then what the run leaves (or, on a dry run, would leave):
    every finding no repair removes, with its severity, so nothing unrepaired hides behind "nothing to do"."""
    head = f"ckpt fix {fixed.target}" + (" --dry-run" if fixed.dry_run else "")
    blocks = [head if fixed.results else f"{head}\nnothing to do: no finding with an automatic repair"]
    blocks += [render_result(r).rstrip("\n") for r in fixed.results]
    if fixed.dry_run and len(fixed.results) > 1:
        blocks.append("(each later plan is made again on the checkpoint the earlier repairs leave)")
    blocks.append("\n".join(_left_lines(fixed)))
    return "\n\n".join(blocks) + "\n"


def _left_lines(fixed: FixAllResult) -> list[str]:
    left = fixed.verdict
    when = "would be left after the whole chain (predicted)" if fixed.dry_run and fixed.results else "left"
    s = left.summary
    out = [f"{when}: {s['error']} error(s), {s['warning']} warning(s), {s['info']} info"]
    out += [f"  {f.severity.upper():<7} {f.code} {f.slug}: {f.message}" for f in left.sorted_findings()]
    out += [f"not repaired by `ckpt fix`: {f.code} {f.slug}; run `{f.fix}`" for f in fixed.not_repaired]
    return out
