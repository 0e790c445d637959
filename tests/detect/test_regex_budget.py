"""ReDoS: a regex the checkpoint's own config supplies (`re:` ignore / targets entries) is matched with Python's `re`,
as vLLM does, under a time budget. `re:([\\w.]+)+Z` made `ckpt doctor` run until killed (normally 0.3 s); now it is
given up after the budget and reported (CK304), and the checkpoint is judged as if it matched nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ckpt_tools.detect.matching import RegexBudget, _may_backtrack_exponentially
from ckpt_tools.pipeline import analyze
from tests import case_ops
from tests.corrupt import copy_fixture

FIXTURE = "llmc-qwen3moe-fp8-dynamic"  # compressed-tensors: `ignore` and `config_groups.group_0.targets`
REDOS = r"re:([\w.]+)+Z"  # exponential on every module name (none ends in Z)


def _with(folder: Path, path: str, entry: str) -> Path:
    case_ops.apply(folder, [{"op": "append_json", "file": "config.json", "path": path, "value": entry}])
    return folder


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def _ck304_patterns(report) -> dict[str, str]:
    found = [f for f in report.findings if f.code == "CK304" and "patterns" in f.details]
    return dict(found[0].details["patterns"]) if found else {}


def test_doctor_reports_a_redos_ignore_entry_instead_of_hanging(fixture_copy) -> None:
    folder = _with(fixture_copy(FIXTURE), "quantization_config.ignore", REDOS)
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "ckpt_tools.cli.main", "doctor", str(folder), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert time.perf_counter() - started < 30  # the budget is 1 s of matching; the rest is start-up
    assert proc.returncode == 1, proc.stderr
    (finding,) = [f for f in json.loads(proc.stdout)["findings"] if f["code"] == "CK304"]
    assert list(finding["details"]["patterns"]) == [REDOS[3:]]
    assert "stall" in finding["message"] and finding["files"] == ["config.json"]


def test_a_redos_target_is_given_up_and_the_rest_judged_as_before(fixture_copy, tmp_path: Path) -> None:
    clean = analyze(str(copy_fixture(FIXTURE, _mkdir(tmp_path / "clean")))).report
    folder = fixture_copy(FIXTURE)
    targets = {"quantization_config.config_groups.group_0.targets": [REDOS, "Linear"]}  # tried first, per module
    case_ops.apply(folder, [{"op": "edit_json", "file": "config.json", "set": targets}])
    report = analyze(str(folder)).report
    assert _ck304_patterns(report) == {REDOS[3:]: "it took over 1 s"}
    assert [f.code for f in report.findings if f.code != "CK304"] == [f.code for f in clean.findings]


def test_an_ordinary_regex_entry_still_matches(fixture_copy, tmp_path: Path) -> None:
    """`re:.*mlp\\.gate$` covers the routers as the exact entries do: same verdict, no CK304."""
    folder = fixture_copy(FIXTURE)
    case_ops.apply(
        folder,
        [
            {
                "op": "edit_json",
                "file": "config.json",
                "set": {"quantization_config.ignore": ["re:.*mlp\\.gate$", "lm_head"]},
            }
        ],
    )
    report = analyze(str(folder)).report
    assert not _ck304_patterns(report)
    clean = analyze(str(copy_fixture(FIXTURE, _mkdir(tmp_path / "clean")))).report
    assert [f.code for f in report.findings] == [f.code for f in clean.findings]  # else CK301: gates unquantized


def test_off_the_main_thread_a_nested_repetition_is_not_evaluated(fixture_copy) -> None:
    """No timer reaches another thread (several Hub targets are judged at once): the pattern's shape decides."""
    folder = _with(fixture_copy(FIXTURE), "quantization_config.ignore", REDOS)
    out: list = []
    worker = threading.Thread(target=lambda: out.append(analyze(str(folder)).report))
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive()
    assert list(_ck304_patterns(out[0])) == [REDOS[3:]]


@pytest.mark.parametrize(
    ("pattern", "risky"),
    [
        (r"([\w.]+)+Z", True),
        (r"(a|ab)*c", True),
        (r"(?:x*)*y", True),
        (r"(a)\1", True),
        (r"(?=a)a", True),
        (r".*mlp\.gate$", False),
        (r"model\.layers\.\d+\.(q|k|v)_proj", False),
        (r".*(gate|up)_proj.*", False),
    ],
)
def test_the_shapes_that_backtrack_exponentially(pattern: str, risky: bool) -> None:
    assert _may_backtrack_exponentially(pattern) is risky


def test_the_budget_is_over_all_names_of_one_pattern() -> None:
    budget = RegexBudget(seconds=0.2)
    started = time.perf_counter()
    hits = [budget.match(r"(x+x+)+y", "x" * 40 + str(i)) for i in range(50)]
    assert time.perf_counter() - started < 5 and not any(hits)
    assert list(budget.slow) == [r"(x+x+)+y"]
    assert budget.match(r".*7$", "name7") and not budget.match(r"(", "(")  # others unaffected; invalid: no match
