"""SARIF 2.1.0 view (OASIS, errata 01): one run per inspected checkpoint, one reportingDescriptor per rule.

Each result is located at the files the finding names (shard, index or config), with the tensors involved as
logical locations. The output validates against the official schema (tests/schemas/sarif-schema-2.1.0.json) and
follows what GitHub code scanning needs to show an alert: relative file URIs against the repository root
(`%SRCROOT%`), a `region.startLine` on every physical location, stable `ruleId`s and our own `partialFingerprints`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import quote

import orjson

from .._version import __version__
from ..model.modules import ROLES
from ..rules.base import Check, Finding, all_rules, registered_check, rule_family
from ..suppress import SuppressedFinding
from .model import Report, Unreadable

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
INFO_URI = "https://github.com/ckpt-tools/ckpt-tools"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}
SRCROOT = "%SRCROOT%"  # the base GitHub code scanning resolves relative URIs against (the repository checkout)
FINGERPRINT_KEY = "ckptFinding/v1"


def render(report: Report, *, color: bool = False) -> str:
    return render_many([report])


def render_many(reports: Iterable[Report | Unreadable], *, color: bool = False) -> str:
    """One SARIF log holding one run per report (`ckpt doctor --pre-commit` checks several folders at once)."""
    return orjson.dumps(sarif_log(reports), option=orjson.OPT_INDENT_2).decode() + "\n"


def sarif_log(reports: Iterable[Report | Unreadable]) -> dict[str, Any]:
    reports = list(reports)
    rules = described([r for r in reports if isinstance(r, Report)])
    descriptors = [_rule_descriptor(r) for r in rules]
    index = {r.code: i for i, r in enumerate(rules)}
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [
            _unreadable_run(r, descriptors) if isinstance(r, Unreadable) else _run(r, descriptors, index)
            for r in reports
        ],
    }


def described(reports: Iterable[Report]) -> list[type[Check]]:
    """Every CK rule, then the checks of the other codes the reports name (check-serve's CS checks): SARIF consumers
    expect every `ruleId` described in the run's `tool.driver.rules`."""
    rules: list[type[Check]] = [*all_rules()]
    known = {r.code for r in rules}
    named = {f.code for r in reports for f in r.findings}
    named |= {str(s["code"]) for r in reports for s in [*r.suppressed, *r.skipped] if s.get("code")}
    others = (registered_check(code) for code in sorted(named - known))
    return rules + [c for c in others if c is not None]


# ---- rules ----------------------------------------------------------------------------------------------------------


def _rule_descriptor(rule: type[Check]) -> dict[str, Any]:
    doc = rule.doc_sections()
    sections = [(k, v) for k, v in doc.items() if k != "summary" and v]
    help_text = "\n\n".join(f"{k}\n{v}" for k, v in sections) or rule.title
    help_markdown = "\n\n".join(f"**{k}**\n\n{v}" for k, v in sections) or rule.title
    family = rule_family(rule.code)  # shown as a tag in code-scanning UIs
    tags = [family.tag if family else "other", "quantization"]
    if rule.fixable:
        tags.append("fixable")
    return {
        "id": rule.code,
        "name": rule.slug,
        "shortDescription": {"text": rule.title},
        "fullDescription": {"text": doc.get("summary") or rule.title},
        "help": {"text": f"{help_text}\n\nMore: `ckpt explain {rule.code}`", "markdown": help_markdown},
        "defaultConfiguration": {"level": LEVELS[rule.severity]},
        "properties": {
            "slug": rule.slug,
            "severity": rule.severity,
            "fixable": rule.fixable,
            "needsValues": rule.needs_values,
            "tags": tags,
        },
    }


# ---- runs and results -----------------------------------------------------------------------------------------------


def _run(report: Report, descriptors: list[dict], index: Mapping[str, int]) -> dict[str, Any]:
    base = _Base.of(report)
    results = [_result(f, base, index) for f in report.sorted_findings()]
    results += [_suppressed_result(s, base, index) for s in report.suppressed if s.get("code")]
    notifications = [
        {
            "level": "note",
            "message": {"text": f"{s.get('code')} {s.get('slug')} did not run: {s.get('reason')}"},
            "associatedRule": _rule_ref(str(s.get("code")), index),
        }
        for s in report.skipped
    ]
    invocation: dict[str, Any] = {"executionSuccessful": True}
    if notifications:
        invocation["toolConfigurationNotifications"] = notifications
    return {
        "tool": {
            "driver": {
                "name": "ckpt",
                "fullName": "ckpt-tools checkpoint doctor",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": INFO_URI,
                "rules": descriptors,
            }
        },
        "invocations": [invocation],
        "results": results,
        "properties": {"target": report.target, "checkpoint": dict(report.checkpoint), "summary": report.summary},
    }


def _unreadable_run(entry: Unreadable, descriptors: list[dict]) -> dict[str, Any]:
    """A target that could not be read: a run that did not execute successfully, with the reason as the tool's
    error notification (how SARIF says "the tool failed here", as opposed to "found this")."""
    return {
        "tool": {"driver": {"name": "ckpt", "version": __version__, "informationUri": INFO_URI, "rules": descriptors}},
        "invocations": [
            {
                "executionSuccessful": False,
                "toolExecutionNotifications": [{"level": "error", "message": {"text": f"{entry.error}"}}],
            }
        ],
        "results": [],
        "properties": {"target": entry.target, "error": entry.error},
    }


def _rule_ref(code: str, index: Mapping[str, int]) -> dict[str, Any]:
    ref: dict[str, Any] = {"id": code}
    if code in index:
        ref["index"] = index[code]
    return ref


def _result(f: Finding, base: _Base, index: Mapping[str, int]) -> dict[str, Any]:
    locations = [_location(base, name) for name in f.files] or [_location(base, None)]
    if f.tensors:
        # They sit on the first location: a finding knows its files, not which shard holds each tensor.
        locations[0]["logicalLocations"] = [_logical(t) for t in f.tensors]
    result: dict[str, Any] = {
        "ruleId": f.code,
        "level": LEVELS[f.severity],
        "message": {"text": f.message + (f" Fix: `{f.fix}`" if f.fix else "")},
        "locations": locations,
        "partialFingerprints": {FINGERPRINT_KEY: fingerprint(f, base)},
        "properties": {"slug": f.slug, "severity": f.severity, "count": f.count, "fix": f.fix},
    }
    if f.code in index:
        result["ruleIndex"] = index[f.code]
    if f.details:
        result["properties"]["details"] = dict(f.details)
    return result


def _suppressed_result(s: SuppressedFinding, base: _Base, index: Mapping[str, int]) -> dict[str, Any]:
    """A finding silenced by configuration stays visible as a suppressed result, as SARIF intends."""
    code = s["code"]
    finding = Finding(
        code=code,
        slug=s.get("slug") or "",
        severity=s["severity"] if s.get("severity") in LEVELS else "warning",
        message=s.get("message") or s.get("reason") or code,
        count=s.get("tensors", 0),  # a `tensors` entry records how many it silenced, not their names
    )
    result = _result(finding, base, index)
    result["suppressions"] = [{"kind": "external", "justification": str(s.get("reason") or "suppressed")}]
    return result


def fingerprint(f: Finding, base: _Base) -> str:
    """Identity of a finding across runs: rule, the files (by path, or Hub repo and name) and the tensors named. Not
    the message (wording may improve between releases), the count (truncated lists keep their first names) or a Hub
    commit (the same defect in the next commit is the same alert)."""
    parts = [f.code, *sorted(base.key + n for n in f.files), *sorted(f.tensors)]
    import hashlib  # only a SARIF rendering needs it (OpenSSL's module costs a text report a few ms)

    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


# ---- locations ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Base:
    """Where a checkpoint's files live, as URIs: relative to the repository root for relative local paths (what
    GitHub expects), `file://` URIs for absolute paths, and Hub URLs at the commit that was read for Hub repos."""

    kind: str  # "relative" | "absolute" | "hub"
    root: str  # prefix of every file's URI, ending in "/" (or empty: the repository root itself)
    key: str  # prefix of every file's identity in fingerprints: the Hub repo id, not the commit, for Hub repos

    @classmethod
    def of(cls, report: Report) -> _Base:
        hub = report.extra.get("hub")  # set by the Hub source: repo_id, revision, commit, endpoint
        if isinstance(hub, Mapping) and hub.get("repo_id"):
            endpoint = str(hub.get("endpoint") or "https://huggingface.co").rstrip("/")
            ref = quote(str(hub.get("commit") or hub.get("revision") or "main"), safe="")
            return cls("hub", f"{endpoint}/{hub['repo_id']}/blob/{ref}/", f"{hub['repo_id']}/")
        path = PurePosixPath(report.target.replace(os.sep, "/"))
        if path.suffix == ".safetensors":  # a single-file target: its findings name files beside it
            path = path.parent
        if path.is_absolute():
            root = path.as_uri().rstrip("/") + "/"
            return cls("absolute", root, root)
        root = "" if str(path) in ("", ".") else quote(str(path)).rstrip("/") + "/"
        return cls("relative", root, root)

    def uri(self, name: str | None) -> str:
        return self.root + (quote(name) if name else "")

    def artifact(self, name: str | None) -> dict[str, Any]:
        loc: dict[str, Any] = {"uri": self.uri(name) or "./"}
        if self.kind == "relative":
            loc["uriBaseId"] = SRCROOT
        return loc


def _logical(name: str) -> dict[str, Any]:
    """A tensor (`...down_proj.weight_scale`: kind "member" of its module) or a module (`...down_proj`: "module");
    findings name either."""
    last = name.rsplit(".", 1)[-1]
    return {"name": last, "fullyQualifiedName": name, "kind": "member" if last in ROLES else "module"}


def _location(base: _Base, name: str | None) -> dict[str, Any]:
    physical: dict[str, Any] = {"artifactLocation": base.artifact(name)}
    if name is not None:
        # GitHub places an alert only with a start line; findings are about whole files, so line 1.
        physical["region"] = {"startLine": 1}
    return {"physicalLocation": physical}
