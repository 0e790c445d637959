"""The report: one object every format renders. Fields follow docs/report.schema.json (schema_version 1); we add
fields, never rename or remove them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from .._version import __version__
from ..rules.base import SEVERITIES, SEVERITY_RANK, Finding

if TYPE_CHECKING:
    from ..suppress import SuppressedFinding

SCHEMA_VERSION = 1


class SkippedRule(TypedDict):
    """A rule that did not run, and why: an entry of `skipped_rules` in the JSON report."""

    code: str
    slug: str
    reason: str


@dataclass(frozen=True)
class Report:
    target: str
    checkpoint: Mapping[str, Any]
    findings: tuple[Finding, ...]
    skipped: tuple[SkippedRule, ...] = ()  # rules that did not run, and why
    suppressed: tuple[SuppressedFinding, ...] = ()  # findings silenced by configuration, with the reason
    extra: Mapping[str, Any] = field(default_factory=dict)
    command: str = "doctor"  # the ckpt subcommand that produced it, for headings

    @property
    def summary(self) -> dict[str, int]:
        counts = dict.fromkeys(reversed(SEVERITIES), 0)
        for f in self.findings:
            counts[f.severity] += 1
        return counts

    def sorted_findings(self) -> list[Finding]:
        return sorted(self.findings, key=lambda f: (-SEVERITY_RANK[f.severity], f.code, f.message))

    def exit_code(self, fail_on: str = "error") -> int:
        """1 when a finding is at or above `fail_on` (error, warning, info; none: never), else 0."""
        from .._inputs import choice

        fail_on = choice(fail_on, ("error", "warning", "info", "none"), "fail_on")
        if fail_on == "none":
            return 0
        floor = SEVERITY_RANK[fail_on]
        return 1 if any(SEVERITY_RANK[f.severity] >= floor for f in self.findings) else 0

    def render(self, format: str = "text") -> str:
        """This report as `ckpt doctor --format FORMAT` prints it (FORMAT: a name in renderers.OUTPUT_FORMATS)."""
        from .._inputs import choice
        from .renderers import OUTPUT_FORMATS, render

        return render(self, choice(format, tuple(OUTPUT_FORMATS), "format"))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "ckpt", "version": __version__},
            "target": self.target,
            "checkpoint": dict(self.checkpoint),
            "findings": [f.to_dict() for f in self.sorted_findings()],
            "summary": self.summary,
        }
        if self.skipped:
            out["skipped_rules"] = [dict(s) for s in self.skipped]
        if self.suppressed:
            out["suppressed"] = [dict(s) for s in self.suppressed]
        out.update(self.extra)
        return out


@dataclass(frozen=True)
class Unreadable:
    """A target of a multi-target run that could not be read at all (missing, not a checkpoint, Hub unreachable): its
    place in the output, with the one-line reason a single target would exit 2 with. In JSON, an entry with an
    `error` field instead of `checkpoint` / `findings` / `summary` (docs/report.schema.json, `$defs/unreadable`)."""

    target: str
    error: str
    command: str = "doctor"

    def exit_code(self, fail_on: str = "error") -> int:
        return 2  # nothing was judged: the command could not run for this target

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "ckpt", "version": __version__},
            "target": self.target,
            "error": self.error,
        }
