"""`ckpt doctor --pre-commit FILE...`: judge every checkpoint folder the staged files belong to, once each.

Git LFS verdict (the design): when a folder's `.safetensors` files are LFS pointers, the weights are not on disk, so
only the checks that judge a file by itself keep their findings (`lfs-pointer`, `invalid-header` of the files that are
present, `index-missing-shard`); every other rule is listed as skipped instead of reporting each missing tensor as a
defect. The `lfs-pointer` finding says which situation this is, because the remedy differs:

- `not-smudged`: `.gitattributes` tracks the file with Git LFS, but this checkout never downloaded the object
  (GIT_LFS_SKIP_SMUDGE, git-lfs not installed). The commit itself is fine; ckpt cannot vouch for weights it cannot
  see, so the gate still fails (a gate that passes what it did not check is worse than none) and says how to check:
  `git lfs pull`, or `ckpt doctor org/name` on the pushed repo.
- `plain-file`: Git does not route the file through LFS, so the commit would store the ~130-byte pointer text as the
  "weights": the upload is broken. Put the real file back and `git lfs track` it.
- `unknown`: not a Git work tree (or no git): the plain lfs-pointer finding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..model.checkpoint import Checkpoint
from ..pipeline import analyze
from ..report.model import Report, SkippedRule
from ..rules.base import Finding, Rule, all_rules
from ..rules.ck101_lfs_pointer import LfsPointer
from ..rules.ck102_index_missing_shard import IndexMissingShard
from ..rules.ck104_invalid_header import InvalidHeader
from .lfs import hub_repo_of, lfs_tracked
from .targets import plan_folders

# Rules that judge a file by itself or by its existence: their findings stay true beside pointer files.
FILE_LEVEL_SLUGS = (LfsPointer.slug, InvalidHeader.slug, IndexMissingShard.slug)


@dataclass(frozen=True)
class GateRun:
    reports: tuple[Report, ...]
    ignored: tuple[str, ...]  # files outside any checkpoint folder

    def exit_code(self, fail_on: str = "error") -> int:
        return max((r.exit_code(fail_on) for r in self.reports), default=0)

    def failing(self, fail_on: str = "error") -> tuple[str, ...]:
        return tuple(r.target for r in self.reports if r.exit_code(fail_on))


def check_files(
    files: Sequence[str],
    *,
    runtime: str | None = None,
    hardware_ids: Sequence[str] = (),
    headers_only: bool = False,
    producer_schema: bool = False,
) -> GateRun:
    """Doctor each checkpoint folder that `files` belong to. Raises `TargetError` for a path whose folder is gone."""
    plan = plan_folders(files)
    reports = []
    for folder in plan.folders:
        analysis = analyze(
            folder,
            runtime=runtime,
            hardware_ids=hardware_ids,
            headers_only=headers_only,
            producer_schema=producer_schema,
        )
        report = analysis.report
        if analysis.checkpoint.lfs_pointers:
            report = pointer_verdict(report, analysis.checkpoint, folder)
        reports.append(report)
    return GateRun(tuple(reports), plan.ignored)


def pointer_verdict(report: Report, ckpt: Checkpoint, folder: str) -> Report:
    """The report of a folder holding LFS pointers: file-level findings only, the pointer finding made specific."""
    rule = LfsPointer
    names = [p.name for p in ckpt.lfs_pointers]
    tracked = lfs_tracked(folder, names)
    groups: dict[str, list[str]] = {}
    for name in names:
        state = {True: "not-smudged", False: "plain-file", None: "unknown"}[tracked[name]]
        groups.setdefault(state, []).append(name)
    hub_repo = hub_repo_of(folder) if "not-smudged" in groups else None

    kept = [f for f in report.findings if f.slug in FILE_LEVEL_SLUGS and f.slug != LfsPointer.slug]
    generic = next((f for f in report.findings if f.slug == LfsPointer.slug), None)
    for state, group in groups.items():
        kept.append(_pointer_finding(rule, state, group, len(ckpt.shard_files), hub_repo, generic, ckpt))

    reason = f"{len(names)} .safetensors file(s) are Git LFS pointers: the tensors they hold cannot be judged"
    skipped: list[SkippedRule] = list(report.skipped)
    already = {s["code"] for s in skipped}
    skipped += [
        {"code": r.code, "slug": r.slug, "reason": reason}
        for r in all_rules()
        if r.slug not in FILE_LEVEL_SLUGS and r.code not in already
    ]
    return replace(report, findings=tuple(kept), skipped=tuple(skipped))


def _pointer_finding(
    rule: type[Rule],
    state: str,
    names: list[str],
    shards: int,
    hub_repo: str | None,
    generic: Finding | None,
    ckpt: Checkpoint,
) -> Finding:
    pointers = [{"file": p.name, "oid": p.oid, "size": p.size} for p in ckpt.lfs_pointers if p.name in names]
    head = f"{len(names)} of {shards} .safetensors file(s) are Git LFS pointers"
    if state == "not-smudged":
        where = f"`ckpt doctor {hub_repo}`" if hub_repo else "`ckpt doctor org/name` (your Hub repo id)"
        message = (
            f"{head} that were not smudged in this checkout (Git LFS tracks them, but the objects were never "
            f"downloaded): the weights are not here, so nothing else was checked. Run `git lfs pull` and commit "
            f"again, or check the pushed repo with {where}."
        )
    elif state == "plain-file":
        message = (
            f"{head} stored as plain Git files (.gitattributes has no `filter=lfs` for them): this commit would "
            f"upload the pointer text, not the weights. Put the real files back (`git lfs pull` in the clone they "
            f"came from) and track them with `git lfs track \"*.safetensors\"`."
        )
    else:
        message = generic.message if generic else f"{head}, not weights; run `git lfs pull` in the clone."
    details = {"lfs": state, "pointers": pointers}
    if hub_repo:
        details["hub_repo"] = hub_repo
    return rule().finding(message, files=names, count=len(names), details=details)
