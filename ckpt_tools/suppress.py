"""Suppression: silence a rule, or the tensors matching a glob, with a reason that the report keeps.

Configuration lives in TOML, read from (in this order):
- `.ckpt.toml` in the checkpoint folder: a top-level `ignore = [...]` (or a `[tool.ckpt]` table);
- `pyproject.toml` in the checkpoint folder: `[tool.ckpt]`;
- `pyproject.toml` in the current directory (a project's CI configuration): `[tool.ckpt]`.

Each entry is a table with a non-empty `reason` and at least one of `rule` (a code or slug) and `tensors` (a glob,
or a list of globs, over tensor names)::

    [tool.ckpt]
    ignore = [
      { rule = "CK401", reason = "weight-only on purpose: served on Hopper" },
      { tensors = "model.visual.*", reason = "vision tower is validated upstream" },
      { rule = "orphan-scale", tensors = "lm_head.*", reason = "our vLLM fork loads lm_head scales" },
    ]

A `rule` entry removes that rule's findings. A `tensors` entry removes the matching tensors from findings: a finding
whose tensors all match is suppressed, one with some left keeps the others (and says how many were suppressed).
Findings that name no tensor are only suppressed by a `rule` entry. A malformed entry is a usage error (exit 2).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypedDict

from .errors import UsageError
from .read.source import Source
from .rules.base import MAX_LISTED_TENSORS, Finding, find_rule

CONFIG_LIMIT = 1024 * 1024
ENTRY_KEYS = frozenset({"rule", "tensors", "reason"})


class _Suppressed(TypedDict):
    code: str
    slug: str
    severity: str
    reason: str  # the suppression entry's reason
    source: str  # the file the entry came from
    message: str  # the finding's message


class SuppressedFinding(_Suppressed, total=False):
    """A finding (or some of its tensors) silenced by configuration: an entry of `suppressed` in the JSON report.
    A `tensors` entry adds its globs and how many tensors they silenced."""

    tensors_glob: list[str]
    tensors: int


@dataclass(frozen=True)
class Suppression:
    reason: str
    source: str  # the file the entry came from
    rule: str | None = None  # rule code, normalised from a code or slug
    globs: tuple[str, ...] = ()

    def covers_rule(self, finding: Finding) -> bool:
        return self.rule is None or self.rule == finding.code

    def matches(self, tensor: str) -> bool:
        return any(fnmatch.fnmatchcase(tensor, g) for g in self.globs)


# ---- reading ------------------------------------------------------------------------------------------------------


def _parse(raw: bytes, label: str) -> Mapping[str, Any]:
    from .knowledge._load import toml_module  # imported when a suppression file exists: most runs read none

    tomllib = toml_module()
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{label}: not valid TOML ({exc})") from None
    except RecursionError:  # the TOML parser recurses once per nested array or inline table
        raise UsageError(f"{label}: not valid TOML (arrays or tables nested too deeply to parse)") from None


def _entries(data: Mapping[str, Any], label: str, *, top_level: bool) -> list[Any]:
    table = data.get("tool", {}).get("ckpt") if isinstance(data.get("tool"), dict) else None
    if table is None and top_level:
        table = data
    if not isinstance(table, dict) or "ignore" not in table:
        return []
    entries = table["ignore"]
    if not isinstance(entries, list):
        raise UsageError(f"{label}: `ignore` must be a list of tables")
    return entries


def _entry(raw: Any, label: str) -> Suppression:
    where = f"{label}: ignore entry {raw!r}"
    if not isinstance(raw, dict):
        raise UsageError(f"{where} must be a table like {{rule = \"CK401\", reason = \"...\"}}")
    unknown = set(raw) - ENTRY_KEYS
    if unknown:
        raise UsageError(f"{where} has unknown key(s) {sorted(unknown)}; allowed: rule, tensors, reason")
    reason = raw.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise UsageError(f"{where} needs a non-empty `reason`: say why the finding does not apply")
    if "rule" not in raw and "tensors" not in raw:
        raise UsageError(f"{where} needs `rule` (a code or slug) and/or `tensors` (a glob)")
    code = None
    if "rule" in raw:
        rule = find_rule(str(raw["rule"])) if isinstance(raw["rule"], str) else None
        if rule is None:
            raise UsageError(f"{where}: no rule {raw['rule']!r}; `ckpt rules` lists them")
        code = rule.code
    globs: tuple[str, ...] = ()
    if "tensors" in raw:
        value = raw["tensors"]
        globs = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, list) else ()
        if not globs or not all(isinstance(g, str) and g for g in globs):
            raise UsageError(f"{where}: `tensors` must be a glob or a list of globs")
    return Suppression(reason=reason.strip(), source=label, rule=code, globs=globs)


def _read_source_file(source: Source, name: str) -> bytes | None:
    root = getattr(source, "root", None)
    listed = name in set(source.list_files())
    if not listed and not (root is not None and (Path(root) / name).is_file()):
        return None
    try:
        return source.read_file(name, CONFIG_LIMIT)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{source.label}: cannot read {name} ({exc})") from None


def load_suppressions(source: Source, cwd: Path | None = None) -> tuple[Suppression, ...]:
    """Every ignore entry that applies to this checkpoint. Raises `UsageError` on a malformed configuration."""
    found: list[tuple[bytes, str, bool]] = []
    for name, top_level in ((".ckpt.toml", True), ("pyproject.toml", False)):
        raw = _read_source_file(source, name)
        if raw is not None:
            found.append((raw, f"{name} (checkpoint)", top_level))
    here = (cwd or Path.cwd()) / "pyproject.toml"
    root = getattr(source, "root", None)
    same_folder = root is not None and Path(root).resolve() == here.parent.resolve()
    if here.is_file() and not same_folder:
        found.append((here.read_bytes(), str(here), False))
    return tuple(
        _entry(entry, label)
        for raw, label, top_level in found
        for entry in _entries(_parse(raw, label), label, top_level=top_level)
    )


# ---- applying -----------------------------------------------------------------------------------------------------


def _record(finding: Finding, s: Suppression, tensors: int) -> SuppressedFinding:
    out: SuppressedFinding = {
        "code": finding.code,
        "slug": finding.slug,
        "severity": finding.severity,
        "reason": s.reason,
        "source": s.source,
        "message": finding.message,
    }
    if s.globs:
        out["tensors_glob"] = list(s.globs)
        out["tensors"] = tensors
    return out


def _narrow(finding: Finding, keep: Sequence[str], dropped: int, reason: str) -> Finding:
    """The finding without the suppressed tensors; list-of-tensor details are filtered the same way."""
    kept = set(keep)
    removed = set(finding.all_tensors) - kept
    details = {
        k: [x for x in v if x not in removed]
        if isinstance(v, list) and v and all(isinstance(x, str) for x in v) and set(v) & removed
        else v
        for k, v in finding.details.items()
    }
    return replace(
        finding,
        message=f"{finding.message} ({dropped} tensor(s) suppressed: {reason})",
        tensors=tuple(keep)[:MAX_LISTED_TENSORS],
        count=max(finding.count - dropped, len(keep)),
        all_tensors=tuple(keep),
        details=MappingProxyType(details),
    )


def apply_suppressions(
    findings: Iterable[Finding], suppressions: Sequence[Suppression]
) -> tuple[list[Finding], list[SuppressedFinding]]:
    """(findings that remain, records of what was suppressed and why)."""
    kept: list[Finding] = []
    records: list[SuppressedFinding] = []
    for finding in findings:
        current: Finding | None = finding
        for s in suppressions:
            if current is None or not s.covers_rule(current):
                continue
            if not s.globs:
                records.append(_record(current, s, current.count))
                current = None
                break
            names = current.all_tensors
            if not names:
                continue
            remaining = [t for t in names if not s.matches(t)]
            dropped = len(names) - len(remaining)
            if not dropped:
                continue
            records.append(_record(current, s, dropped))
            current = None if not remaining else _narrow(current, remaining, dropped, s.reason)
        if current is not None:
            kept.append(current)
    return kept, records
