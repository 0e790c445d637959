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
A `pass` case must produce no finding of the rule. `checkpoint` compares fields of the report's checkpoint summary
(as `details` does: dicts and lists by containment, an empty one by equality).

A case of a CS serve check (ckpt_tools/serve/checks/) runs `ckpt check-serve` instead of `ckpt doctor`: it names
the serve command to judge, on the (corrupted) copy of the fixture, and optionally the profiles::

    rule = "CS120"

    [[case]]
    name = "262144 on a 4k checkpoint"
    kind = "fail"
    fixture = "base-llama-bf16"
    command = "vllm serve {target} --max-model-len 262144"   # {target}: the copy's path
    runtime = "vllm-0.33"                                      # optional, as `--runtime` (else from the image)
    hardware = "gb10"                                          # optional, as `--hardware`
    expect = { fix = "--max-model-len 4096" }

Its baseline is check-serve's verdict on the untouched fixture for the bare `vllm serve {target}` on the same
profiles, so a failing case may add only the findings of the rule (and of `also`).
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
from ckpt_tools.report.model import Report
from ckpt_tools.report.renderers import OUTPUT_FORMATS, render
from ckpt_tools.serve import check_serve
from tests import case_ops
from tests.corrupt import GENUINE, copy_fixture

CASES_DIR = Path(__file__).resolve().parents[1] / "rule_cases"


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


BARE_COMMAND = "vllm serve {target}"


def serve_report(folder: Path, case: dict[str, Any], command: str) -> Report:
    return check_serve(
        str(folder),
        command.replace("{target}", str(folder)),
        runtime=case.get("runtime"),
        hardware=case.get("hardware"),
        headers_only=bool(case.get("headers_only", False)),
    ).report


@cache
def serve_baseline(fixture: str, runtime: str | None, hardware: str | None, headers_only: bool) -> frozenset[str]:
    """Codes of warnings and errors of check-serve on the untouched fixture with the bare command."""
    case = {"runtime": runtime, "hardware": hardware, "headers_only": headers_only}
    report = serve_report(GENUINE / fixture, case, BARE_COMMAND)
    return frozenset(f.code for f in report.findings if f.severity != "info")


def _contains(actual: Any, expected: Any) -> bool:
    if expected in ({}, []):  # "contains nothing" would hold of anything: an empty expectation means empty
        return actual == expected
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
    if rule.startswith("CS"):
        report = serve_report(folder, case, case["command"])
        before = serve_baseline(case["fixture"], case.get("runtime"), case.get("hardware"), headers_only)
    else:
        report = analyze(
            str(folder),
            headers_only=headers_only,
            runtime=case.get("runtime"),
            producer_schema=bool(case.get("producer_schema", False)),
            hardware_ids=tuple(case.get("hardware", ())),
        ).report
        before = baseline(case["fixture"], headers_only)
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
        allowed = {rule, *case.get("also", [])} | before
        extra = sorted({f.code for f in report.findings if f.severity != "info" and f.code not in allowed})
        assert not extra, f"other rules fired too ({extra}); list them in `also` if intended:\n{summary}"
    for key, value in case.get("checkpoint", {}).items():
        assert _contains(report.checkpoint.get(key), value), f"checkpoint.{key} = {report.checkpoint.get(key)!r}"
    # Every format renders the findings (details included) without error; JSON round-trips.
    for fmt in OUTPUT_FORMATS:
        text = render(report, fmt)
        if fmt in ("json", "sarif"):
            json.loads(text)
