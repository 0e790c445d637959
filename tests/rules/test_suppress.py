"""Suppression: `[tool.ckpt]` in pyproject.toml (checkpoint folder or current directory) and `.ckpt.toml` in the
checkpoint folder silence rules or tensors, every entry with a reason the report keeps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt_tools.errors import UsageError
from ckpt_tools.pipeline import analyze
from tests import case_ops

ORPHANS = [
    {"op": "copy_tensor", "from": "model.layers.0.mlp.down_proj.input_scale", "to": "lm_head.input_scale"},
    {"op": "drop", "pattern": r"^model\.layers\.1\.self_attn\.o_proj\.weight$"},
]


@pytest.fixture
def orphans(fixture_copy) -> Path:
    folder = fixture_copy("modelopt-llama-nvfp4")
    case_ops.apply(folder, ORPHANS)
    return folder


def codes(report) -> set[str]:
    return {f.code for f in report.findings}


def test_ckpt_toml_suppresses_a_rule_by_code(fixture_copy) -> None:
    folder = fixture_copy("llmc-llama-nvfp4a16")
    assert "CK401" in codes(analyze(str(folder)).report)
    (folder / ".ckpt.toml").write_text('ignore = [{rule = "CK401", reason = "weight-only on purpose: Hopper"}]\n')
    report = analyze(str(folder)).report
    assert "CK401" not in codes(report)
    [record] = report.suppressed
    assert record["code"] == "CK401" and record["reason"] == "weight-only on purpose: Hopper"
    assert record["source"] == ".ckpt.toml (checkpoint)"
    assert report.to_dict()["suppressed"][0]["reason"] == "weight-only on purpose: Hopper"


def test_slug_and_tool_table_in_checkpoint_pyproject(fixture_copy) -> None:
    folder = fixture_copy("llmc-llama-nvfp4a16")
    (folder / "pyproject.toml").write_text(
        '[tool.ckpt]\nignore = [{rule = "nvfp4-weight-only", reason = "served weight-only"}]\n'
    )
    report = analyze(str(folder)).report
    assert "CK401" not in codes(report)
    assert report.suppressed[0]["source"] == "pyproject.toml (checkpoint)"


def test_pyproject_in_current_directory(fixture_copy, tmp_path: Path, monkeypatch) -> None:
    folder = fixture_copy("llmc-llama-nvfp4a16")
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.ckpt]\nignore = [{rule = "CK401", reason = "CI knows"}]\n'
    )
    monkeypatch.chdir(project)
    report = analyze(str(folder)).report
    assert "CK401" not in codes(report)
    assert report.suppressed[0]["source"].endswith("project/pyproject.toml")


def test_pyproject_without_tool_ckpt_changes_nothing(fixture_copy, tmp_path: Path, monkeypatch) -> None:
    folder = fixture_copy("llmc-llama-nvfp4a16")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    monkeypatch.chdir(tmp_path)
    report = analyze(str(folder)).report
    assert "CK401" in codes(report) and not report.suppressed


def test_tensor_glob_narrows_a_finding(orphans: Path) -> None:
    before = next(f for f in analyze(str(orphans)).report.findings if f.code == "CK302")
    assert before.count == 4 and "lm_head.input_scale" in before.details["orphans"]
    (orphans / ".ckpt.toml").write_text(
        'ignore = [{tensors = "lm_head.*", reason = "our fork loads lm_head scales"}]\n'
    )
    report = analyze(str(orphans)).report
    after = next(f for f in report.findings if f.code == "CK302")
    assert after.count == 3
    assert "lm_head.input_scale" not in after.tensors and "lm_head.input_scale" not in after.details["orphans"]
    assert len(after.details["orphans"]) == 3
    assert "1 tensor(s) suppressed: our fork loads lm_head scales" in after.message
    assert report.suppressed[0]["tensors"] == 1 and report.suppressed[0]["tensors_glob"] == ["lm_head.*"]


def test_tensor_glob_covering_every_tensor_suppresses_the_finding(orphans: Path) -> None:
    (orphans / ".ckpt.toml").write_text(
        'ignore = [{rule = "orphan-scale", tensors = ["lm_head.*", "model.layers.1.self_attn.o_proj.*"], '
        'reason = "dropped downstream"}]\n'
    )
    report = analyze(str(orphans)).report
    assert "CK302" not in codes(report)
    assert report.suppressed[0]["tensors"] == 4


def test_sarif_keeps_a_tensor_glob_suppression_as_a_suppressed_result(orphans: Path) -> None:
    """A `tensors` entry records how many tensors it silenced (an int), which SARIF once read as tensor names."""
    (orphans / ".ckpt.toml").write_text(
        'ignore = [{tensors = "lm_head.*", reason = "our fork loads lm_head scales"}]\n'
    )
    sarif = json.loads(analyze(str(orphans)).report.render("sarif"))
    [silenced] = [r for r in sarif["runs"][0]["results"] if r.get("suppressions")]
    assert silenced["ruleId"] == "CK302"
    assert silenced["suppressions"] == [{"kind": "external", "justification": "our fork loads lm_head scales"}]


def test_rule_scoped_glob_leaves_other_rules_alone(fixture_copy) -> None:
    folder = fixture_copy("llmc-qwen35moe-nvfp4a16")
    (folder / ".ckpt.toml").write_text(
        'ignore = [{rule = "CK502", tensors = "model.language_model.layers.*.linear_attn.*", reason = "known"}]\n'
    )
    report = analyze(str(folder)).report
    assert "CK502" not in codes(report) and "CK401" in codes(report)


def test_findings_without_tensors_need_a_rule_entry(fixture_copy) -> None:
    folder = fixture_copy("modelopt-llama-nvfp4")
    case_ops.apply(
        folder, [{"op": "edit_json", "file": "hf_quant_config.json", "set": {"quantization.quant_algo": "FP8"}}]
    )
    (folder / ".ckpt.toml").write_text('ignore = [{tensors = "*", reason = "everything"}]\n')
    assert "CK304" in codes(analyze(str(folder)).report)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('ignore = [{rule = "CK401"}]', "needs a non-empty `reason`"),
        ('ignore = [{rule = "CK401", reason = "  "}]', "needs a non-empty `reason`"),
        ('ignore = [{rule = "CK999", reason = "x"}]', "no rule 'CK999'"),
        ('ignore = [{reason = "x"}]', "needs `rule`"),
        ('ignore = [{rule = "CK401", reason = "x", why = "y"}]', "unknown key(s) ['why']"),
        ('ignore = [{tensors = 3, reason = "x"}]', "`tensors` must be a glob"),
        ('ignore = "CK401"', "must be a list of tables"),
        ('ignore = ["CK401"]', "must be a table"),
        ('ignore = [', "not valid TOML"),
        ("ignore = " + "[" * 900 + "]" * 900, "nested too deeply"),
        ("x = " + "{a = " * 900 + "1" + "}" * 900, "nested too deeply"),
    ],
)
def test_malformed_configuration_is_a_usage_error(fixture_copy, text: str, message: str) -> None:
    folder = fixture_copy("llmc-llama-nvfp4a16")
    (folder / ".ckpt.toml").write_text(text + "\n")
    with pytest.raises(UsageError, match=None) as err:
        analyze(str(folder))
    assert message in str(err.value) and ".ckpt.toml" in str(err.value)


def _ckpt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ckpt_tools.cli.main", *args], capture_output=True, text=True)


def test_cli_reason_in_text_and_json_and_exit_codes(fixture_copy) -> None:
    folder = fixture_copy("modelopt-llama-nvfp4")
    case_ops.apply(folder, [{"op": "drop", "pattern": r"\.input_scale$"}])
    assert _ckpt("doctor", str(folder)).returncode == 1
    (folder / ".ckpt.toml").write_text('ignore = [{rule = "CK401", reason = "tracked in issue 12"}]\n')
    text = _ckpt("doctor", str(folder))
    assert text.returncode == 0
    assert "suppressed CK401 nvfp4-weight-only: tracked in issue 12" in text.stdout
    data = json.loads(_ckpt("doctor", str(folder), "--format", "json").stdout)
    assert data["suppressed"][0]["code"] == "CK401" and data["suppressed"][0]["reason"] == "tracked in issue 12"
    assert all(f["code"] != "CK401" for f in data["findings"])


def test_cli_missing_reason_exits_2_with_one_line(fixture_copy) -> None:
    folder = fixture_copy("llmc-llama-nvfp4a16")
    (folder / ".ckpt.toml").write_text('ignore = [{rule = "CK401"}]\n')
    out = _ckpt("doctor", str(folder))
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("ckpt: .ckpt.toml (checkpoint): ignore entry")


def test_cli_deeply_nested_ckpt_toml_exits_2_with_one_line(fixture_copy) -> None:
    """A RecursionError traceback before: the TOML parser recurses once per level."""
    folder = fixture_copy("llmc-llama-nvfp4a16")
    (folder / ".ckpt.toml").write_text("ignore = " + "[" * 900 + "]" * 900 + "\n")
    out = _ckpt("doctor", str(folder))
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("ckpt: .ckpt.toml (checkpoint): not valid TOML")
