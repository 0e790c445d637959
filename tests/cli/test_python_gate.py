"""The Python API a quantization script calls before uploading, and the documented examples, run as written."""

from __future__ import annotations

import inspect
import json
import re
import shlex
import typing
from pathlib import Path

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

import ckpt_tools
from ckpt_tools.cli.main import app
from ckpt_tools.errors import CkptError, TargetError, UsageError
from tests.corrupt import GENUINE, copy_fixture, patch_tensor_bytes

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
SARIF = jsonschema.Draft4Validator(json.loads((ROOT / "tests" / "schemas" / "sarif-schema-2.1.0.json").read_text()))

pytestmark = pytest.mark.skipif(not GENUINE.is_dir(), reason="genuine fixtures are not present")


def test_doctor_is_typed_and_keyword_only() -> None:
    sig = inspect.signature(ckpt_tools.doctor)
    params = list(sig.parameters.values())
    assert params[0].name == "path_or_repo" and params[0].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[1:])
    hints = typing.get_type_hints(ckpt_tools.doctor)
    assert hints["return"] is ckpt_tools.Report
    assert set(hints) == {p.name for p in params} | {"return"}
    assert "Args:" in ckpt_tools.doctor.__doc__ and "export_hf_checkpoint" in ckpt_tools.doctor.__doc__
    with pytest.raises(TypeError):
        ckpt_tools.doctor(GENUINE / "modelopt-llama-nvfp4", "vllm-0.33")  # type: ignore[misc]


def test_doctor_takes_paths_and_matches_the_cli(tmp_path: Path) -> None:
    folder = copy_fixture("modelopt-llama-nvfp4", tmp_path)
    patch_tensor_bytes(folder, "model.layers.1.mlp.gate_proj.weight_scale", {5: 0xFF})
    report = ckpt_tools.doctor(folder)
    assert isinstance(report, ckpt_tools.Report)
    assert report.target == str(folder)
    assert report.exit_code("error") == 1 and report.summary["error"] == 1
    (finding,) = report.findings  # the defect alone: the kernels are header facts, not findings
    assert report.checkpoint["kernels"]["vllm_version"] == "0.33.0"
    assert finding.slug == "nan-fp8-scale" and finding.tensors == ("model.layers.1.mlp.gate_proj.weight_scale",)
    cli = CliRunner().invoke(app, ["doctor", str(folder), "--format", "json"])
    assert json.loads(cli.stdout) == json.loads(report.render("json")) == report.to_dict()
    assert report.render("text") == CliRunner().invoke(app, ["doctor", str(folder)]).stdout


def test_doctor_options(tmp_path: Path) -> None:
    folder = copy_fixture("modelopt-llama-nvfp4", tmp_path)
    patch_tensor_bytes(folder, "model.layers.1.mlp.gate_proj.weight_scale", {5: 0xFF})
    quick = ckpt_tools.doctor(str(folder), headers_only=True)
    assert [f.code for f in quick.findings] == [] and "nan-fp8-scale" in {s["slug"] for s in quick.skipped}
    awq = GENUINE / "modelopt-llama-nvfp4-awq"
    assert "ERROR" in ckpt_tools.doctor(awq, runtime="vllm-0.33", hardware=["gb10"]).render("text")
    with pytest.raises(UsageError, match="unknown hardware profile 'nope'"):
        ckpt_tools.doctor(folder, hardware=["nope"])
    with pytest.raises(TargetError):
        ckpt_tools.doctor(tmp_path / "not-there")
    assert issubclass(TargetError, CkptError)


def _readme_block(marker: str) -> str:
    match = re.search(re.escape(marker) + r"\s*```python\n(.*?)```", README, re.S)
    assert match, f"README lost its {marker} block"
    return match.group(1)


def test_the_readme_api_example_uploads_a_good_export_and_stops_a_broken_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The block runs exactly as printed, in a folder where its `./llama-3.1-8b-nvfp4` is a genuine export."""
    import huggingface_hub

    uploads: list[dict] = []
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", lambda self, **kw: uploads.append(kw))
    code = compile(_readme_block("<!-- api-example -->"), "README", "exec")

    (tmp_path / "good").mkdir()
    monkeypatch.chdir(tmp_path / "good")
    copy_fixture("modelopt-llama-nvfp4", tmp_path / "good").rename(tmp_path / "good" / "llama-3.1-8b-nvfp4")
    exec(code, {})
    assert uploads == [{"folder_path": "./llama-3.1-8b-nvfp4", "repo_id": "acme/llama-3.1-8b-nvfp4"}]

    (tmp_path / "bad").mkdir()
    monkeypatch.chdir(tmp_path / "bad")
    bad = copy_fixture("modelopt-llama-nvfp4", tmp_path / "bad").rename(tmp_path / "bad" / "llama-3.1-8b-nvfp4")
    patch_tensor_bytes(bad, "model.layers.0.self_attn.q_proj.weight_scale", {0: 0x7F})
    with pytest.raises(SystemExit) as stopped:
        exec(code, {})
    assert "ERROR   CK501 nan-fp8-scale" in str(stopped.value.code)
    assert len(uploads) == 1  # nothing more was uploaded


def test_readme_and_docs_pre_commit_snippets_name_real_hooks() -> None:
    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert set(hooks) == {"ckpt-doctor", "ckpt-doctor-strict"}
    assert hooks["ckpt-doctor"]["entry"] == "ckpt doctor --pre-commit"
    assert hooks["ckpt-doctor-strict"]["entry"] == "ckpt doctor --pre-commit --fail-on warning"
    assert all(h["require_serial"] is True and h["language"] == "python" for h in hooks.values())
    pattern = re.compile(hooks["ckpt-doctor"]["files"])
    for path in (
        "model.safetensors",
        "m/model-00001-of-00004.safetensors",
        "m/model.safetensors.index.json",
        "m/config.json",
        "m/hf_quant_config.json",
    ):
        assert pattern.search(path), path
    for path in ("m/tokenizer_config.json", "m/generation_config.json", "m/README.md", "m/x.safetensors.tmp"):
        assert not pattern.search(path), path
    for text in (README, (ROOT / "docs" / "pre-commit.md").read_text()):
        snippet = yaml.safe_load(re.search(r"```yaml\n(repos:.*?)```", text, re.S).group(1))
        listed = [h["id"] for repo in snippet["repos"] for h in repo["hooks"]]
        assert listed and set(listed) <= set(hooks)


def test_the_github_actions_example_runs_and_uploads_what_it_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = (ROOT / "docs" / "github-actions.md").read_text()
    workflow = yaml.safe_load(re.search(r"```yaml\n(name:.*?)```", doc, re.S).group(1))
    steps = workflow["jobs"]["ckpt"]["steps"]
    assert workflow["permissions"]["security-events"] == "write"
    checkout = next(s for s in steps if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["lfs"] is True
    command = next(s["run"] for s in steps if "ckpt doctor" in s.get("run", ""))
    upload = next(s for s in steps if s.get("uses", "").startswith("github/codeql-action/upload-sarif@"))

    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    copy_fixture("modelopt-llama-w4a16-nvfp4", tmp_path / "models").rename(tmp_path / "models" / "llama-nvfp4")
    argv = shlex.split(command)
    assert argv[:2] == ["ckpt", "doctor"]
    result = CliRunner().invoke(app, argv[1:])
    assert result.exit_code == 0, result.output
    log = json.loads((tmp_path / upload["with"]["sarif_file"]).read_text())
    assert list(SARIF.iter_errors(log)) == []
    (alert,) = log["runs"][0]["results"]  # CK401's warning alone: the kernels are not findings
    assert alert["ruleId"] == "CK401"
    assert alert["locations"][0]["physicalLocation"]["artifactLocation"] == {
        "uri": "models/llama-nvfp4/model.safetensors",
        "uriBaseId": "%SRCROOT%",
    }


SERVE_SCHEMA = jsonschema.Draft202012Validator(
    {"$defs": json.loads((ROOT / "docs" / "report.schema.json").read_text())["$defs"], "$ref": "#/$defs/serve_flags"}
)


def test_serve_flags_api_is_typed_and_follows_the_contract(genuine: str) -> None:
    hints = typing.get_type_hints(ckpt_tools.serve_flags)
    assert hints["return"].__name__ == "ServePlan"
    plan = ckpt_tools.serve_flags(str(GENUINE / genuine), hardware="gb10")
    errors = sorted(e.message for e in SERVE_SCHEMA.iter_errors(plan.to_dict()))
    assert errors == []
    broken = {**plan.to_dict(), "argv": [], "flags": [{"flag": "quantization"}]}
    assert len(list(SERVE_SCHEMA.iter_errors(broken))) >= 2
    assert plan.argv[:3] == ("vllm", "serve", str(GENUINE / genuine)) and plan.command == shlex.join(plan.argv)


def test_the_readme_serve_api_example_runs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The block runs exactly as printed from the repository root: the serve command with its reasons, then
    check-serve's verdict on a command with the wrong --quantization, as `ckpt check-serve` counts and exits."""
    monkeypatch.chdir(ROOT)
    exec(compile(_readme_block("<!-- serve-api-example -->"), "README", "exec"), {})
    out = capsys.readouterr().out
    assert out.startswith("vllm serve ") and "--quantization compressed-tensors" in out
    assert "--gpu-memory-utilization 0.85:" in out
    assert re.search(r"^\{'error': [1-9]\d*, .*\} 1$", out, re.M), out
    assert "CS110 quantization-mismatch" in out
