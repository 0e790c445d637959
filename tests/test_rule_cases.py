"""The one generic test for every rule case file in tests/rule_cases/ (sqlfluff style).

A case file is TOML named after a rule's slug::

    rule = "CK302"

    [[case]]
    name = "lm_head input_scale beside an excluded BF16 lm_head"
    kind = "fail"                       # or "pass"
    fixture = "modelopt-llama-nvfp4"    # a fixtures/genuine entry
    steps = [{ op = "copy_tensor", from = "...", to = "lm_head.input_scale" }]   # tests/case_ops.py
    expect = { severity = "error", tensors = ["lm_head.input_scale"], message = ["lm_head"] }
    also = ["CK106"]                    # other rules this corruption legitimately triggers
    findings = 1                        # optional: exactly this many findings of the rule
    headers_only = false                # optional: analyze options (also `runtime`, `producer_schema`, `hardware`)
    requires = ["compressed_tensors"]   # optional: modules the case needs; skipped where they are missing

A `fail` case needs at least one finding of the rule that matches every `expect` field: `severity`, `count`,
`tensors` (all listed names are among the finding's tensors), `message` (substrings), `fix` (substring), `details`
(key -> expected value; for lists and dicts, the expected items must be contained). Every other warning or error
must come from a rule listed in `also` or already be present on the untouched fixture, so a defect is reported once.
A `pass` case must produce no finding of the rule. `checkpoint` compares fields of the report's checkpoint summary.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ckpt_tools.pipeline import analyze
from ckpt_tools.report.formats import RENDERERS, render
from tests import case_ops
from tests.corrupt import GENUINE, copy_fixture

CASES_DIR = Path(__file__).parent / "rule_cases"


def load_cases() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(CASES_DIR.glob("*.toml")):
        data = tomllib.loads(path.read_text())
        for case in data.get("case", []):
            out.append((data["rule"], {**case, "_file": path.name}))
    return out


CASES = load_cases()


@cache
def baseline(fixture: str, headers_only: bool) -> frozenset[str]:
    """Codes of warnings and errors on the untouched fixture."""
    report = analyze(str(GENUINE / fixture), headers_only=headers_only).report
    return frozenset(f.code for f in report.findings if f.severity != "info")


def _contains(actual: Any, expected: Any) -> bool:
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and _contains(actual[k], v) for k, v in expected.items())
    if isinstance(expected, list) and isinstance(actual, (list, tuple)):
        return all(any(_contains(a, e) for a in actual) for e in expected)
    return actual == expected


def matches(finding, expect: dict[str, Any]) -> list[str]:
    """Reasons this finding does not meet the expectation (empty: it does)."""
    bad = []
    if "severity" in expect and finding.severity != expect["severity"]:
        bad.append(f"severity {finding.severity} != {expect['severity']}")
    if "count" in expect and finding.count != expect["count"]:
        bad.append(f"count {finding.count} != {expect['count']}")
    for name in expect.get("tensors", []):
        if name not in finding.all_tensors:
            bad.append(f"tensor {name} not listed")
    messages = expect.get("message", [])
    for part in [messages] if isinstance(messages, str) else messages:
        if part not in finding.message:
            bad.append(f"message lacks {part!r}")
    if "fix" in expect and (finding.fix is None or expect["fix"] not in finding.fix):
        bad.append(f"fix {finding.fix!r} lacks {expect['fix']!r}")
    for key, value in expect.get("details", {}).items():
        if not _contains(finding.details.get(key), value):
            bad.append(f"details[{key!r}] = {finding.details.get(key)!r}, expected {value!r}")
    return bad


@pytest.mark.parametrize(("rule", "case"), CASES, ids=[f"{c['_file'][:-5]}:{c['kind']}:{c['name']}" for _, c in CASES])
def test_rule_case(rule: str, case: dict[str, Any], tmp_path: Path) -> None:
    for module in case.get("requires", []):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module} (the `producers` extra)")
    folder = copy_fixture(case["fixture"], tmp_path)
    case_ops.apply(folder, case.get("steps", []))
    headers_only = bool(case.get("headers_only", False))
    report = analyze(
        str(folder),
        headers_only=headers_only,
        runtime=case.get("runtime"),
        producer_schema=bool(case.get("producer_schema", False)),
        hardware_ids=tuple(case.get("hardware", ())),
    ).report
    mine = [f for f in report.findings if f.code == rule]
    summary = "\n".join(f"  {f.code} {f.severity}: {f.message}" for f in report.findings)
    if case["kind"] == "pass":
        assert not mine, f"{rule} fired on a passing case:\n{summary}"
    else:
        assert mine, f"{rule} did not fire:\n{summary}"
        if "findings" in case:
            assert len(mine) == case["findings"], f"{rule} gave {len(mine)} findings:\n{summary}"
        expect = case.get("expect", {})
        reasons = [matches(f, expect) for f in mine]
        assert any(not r for r in reasons), f"no {rule} finding meets {expect}: {reasons}\n{summary}"
        allowed = {rule, *case.get("also", [])} | baseline(case["fixture"], headers_only)
        extra = sorted({f.code for f in report.findings if f.severity != "info" and f.code not in allowed})
        assert not extra, f"other rules fired too ({extra}); list them in `also` if intended:\n{summary}"
    for key, value in case.get("checkpoint", {}).items():
        assert report.checkpoint.get(key) == value, f"checkpoint.{key} = {report.checkpoint.get(key)!r}"
    # Every format renders the findings (details included) without error; JSON round-trips.
    for fmt in RENDERERS:
        text = render(report, fmt)
        if fmt in ("json", "sarif"):
            json.loads(text)
