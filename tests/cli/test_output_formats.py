"""Machine-readable outputs: SARIF validates against the official OASIS SARIF 2.1.0 schema, JSON against the report
contract's schema (docs/report.schema.json), on genuine fixtures and on corrupted copies; Markdown is safe to post."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from ckpt_tools import doctor
from ckpt_tools.report import sarif
from ckpt_tools.report.model import Report
from ckpt_tools.report.renderers import render_many
from ckpt_tools.rules.base import Finding, all_rules
from tests.corrupt import GENUINE, copy_fixture, drop, edit_json, patch_tensor_bytes, rename, shards

ROOT = Path(__file__).resolve().parents[2]
SARIF_SCHEMA = json.loads((ROOT / "tests" / "schemas" / "sarif-schema-2.1.0.json").read_text())
REPORT_SCHEMA = json.loads((ROOT / "docs" / "report.schema.json").read_text())
SARIF = jsonschema.Draft4Validator(SARIF_SCHEMA, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)
REPORT = jsonschema.Draft202012Validator(REPORT_SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)

needs_genuine = pytest.mark.skipif(not GENUINE.is_dir(), reason="genuine fixtures are not present")


def sarif_errors(doc: dict) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in SARIF.iter_errors(doc)]


def report_errors(doc: dict) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in REPORT.iter_errors(doc)]


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from tmp_path, as CI runs from the repository root, so targets are relative paths."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _copy(name: str, root: Path, label: str) -> Path:
    return copy_fixture(name, root).rename(root / label)


def defective_copies(root: Path) -> dict[str, Path]:
    """One corrupted copy per defect class, each made from a genuine fixture."""
    out: dict[str, Path] = {}
    truncated = _copy("modelopt-llama-fp8", root, "truncated")
    shard = shards(truncated)[0]
    shard.write_bytes(shard.read_bytes()[:-100])
    out["invalid-header"] = truncated

    nan = _copy("modelopt-llama-nvfp4", root, "nan")
    patch_tensor_bytes(nan, "model.layers.1.self_attn.o_proj.weight_scale", {3: 0xFF})
    out["nan-fp8-scale"] = nan

    missing = _copy("llmc-qwen3moe-nvfp4-sharded", root, "missing")
    (missing / "model-00003-of-00003.safetensors").unlink()
    out["index-missing-shard"] = missing

    nested = _copy("llmc-llama-nvfp4", root, "nested")
    rename(nested, lambda n: n.replace("model.layers.", "model.language_model.visual.layers.", 1))
    out["misnested-prefix"] = nested

    weight_only = _copy("modelopt-llama-nvfp4", root, "no-input-scales")
    drop(weight_only, lambda n: n.endswith(".input_scale") and ".layers.0." in n)
    out["nvfp4-weight-only"] = weight_only

    mismatch = _copy("modelopt-llama-nvfp4", root, "cfg")
    edit_json(mismatch / "hf_quant_config.json", lambda j: j["quantization"].__setitem__("quant_algo", "FP8"))
    out["quant-config-mismatch"] = mismatch
    return out


# ---- SARIF ----------------------------------------------------------------------------------------------------------


def test_the_shipped_schema_is_the_official_one_and_rejects_invalid_logs() -> None:
    assert SARIF_SCHEMA["id"] == sarif.SCHEMA_URI
    assert SARIF_SCHEMA["title"] == "Static Analysis Results Format (SARIF) Version 2.1.0 JSON Schema"
    bad = {
        "version": "2.1.0",
        "runs": [{"tool": {"driver": {"name": "x"}}, "results": [{"message": {"text": "m"}, "level": "info"}]}],
    }  # SARIF has no level "info": it is "note"
    assert sarif_errors(bad)
    assert sarif_errors({"version": "2.1.0", "runs": [{"tool": {}}]})  # a driver is required
    # URI formats are checked (rfc3986-validator, in the test extra), so a malformed informationUri fails.
    assert sarif_errors({"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x", "informationUri": "a b"}}}]})


@needs_genuine
def test_sarif_validates_for_every_genuine_fixture(genuine: str, cwd: Path) -> None:
    folder = copy_fixture(genuine, cwd)
    doc = json.loads(doctor(folder.name).render("sarif"))
    assert sarif_errors(doc) == []
    (run,) = doc["runs"]
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == [r.code for r in all_rules()]


@needs_genuine
def test_sarif_of_defective_checkpoints_validates_and_locates_each_finding(cwd: Path) -> None:
    copies = defective_copies(Path("."))
    reports = [doctor(str(path)) for path in copies.values()]
    doc = json.loads(render_many(reports, "sarif"))
    assert sarif_errors(doc) == []
    assert len(doc["runs"]) == len(copies)

    for (slug, path), run in zip(copies.items(), doc["runs"], strict=True):
        rules = run["tool"]["driver"]["rules"]
        by_slug = {r["name"]: r for r in rules}
        results = [r for r in run["results"] if r["properties"]["slug"] == slug]
        assert results, f"{slug}: no result in {path}"
        for result in run["results"]:
            rule = rules[result["ruleIndex"]]
            assert result["ruleId"] == rule["id"] == by_slug[result["properties"]["slug"]]["id"]
            assert (
                result["level"]
                == {"error": "error", "warning": "warning", "info": "note"}[result["properties"]["severity"]]
            )
            for loc in result["locations"]:
                art = loc["physicalLocation"]["artifactLocation"]
                assert art["uriBaseId"] == "%SRCROOT%"
                assert art["uri"].startswith(f"{path.as_posix()}/")
                file = art["uri"].rsplit("/", 1)[1]
                assert (path / file).exists() or slug == "index-missing-shard"
                assert loc["physicalLocation"]["region"]["startLine"] == 1
            assert set(result["partialFingerprints"]) == {sarif.FINGERPRINT_KEY}

    nan = next(r for r in doc["runs"][1]["results"] if r["ruleId"] == "CK501")
    assert nan["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "nan/model.safetensors"
    assert nan["locations"][0]["logicalLocations"] == [
        {"name": "weight_scale", "fullyQualifiedName": "model.layers.1.self_attn.o_proj.weight_scale", "kind": "member"}
    ]
    assert "ckpt scrub-nan" in nan["message"]["text"]
    # The shard a missing-shard finding names is the index, where the dangling entry lives.
    missing = next(r for r in doc["runs"][2]["results"] if r["ruleId"] == "CK102")
    assert (
        missing["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "missing/model.safetensors.index.json"
    )


@needs_genuine
def test_fingerprints_are_stable_across_runs_and_distinct_between_findings(cwd: Path) -> None:
    copies = defective_copies(Path("."))
    first = json.loads(render_many([doctor(str(p)) for p in copies.values()], "sarif"))
    second = json.loads(render_many([doctor(str(p)) for p in copies.values()], "sarif"))
    prints = [r["partialFingerprints"] for run in first["runs"] for r in run["results"]]
    assert prints == [r["partialFingerprints"] for run in second["runs"] for r in run["results"]]
    values = [p[sarif.FINGERPRINT_KEY] for p in prints]
    assert len(values) == len(set(values)) > 5
    # The same defect in a checkpoint at another path is another alert.
    moved = Path("elsewhere")
    shutil.copytree(copies["nan-fp8-scale"], moved)
    again = json.loads(doctor(str(moved)).render("sarif"))["runs"][0]["results"][0]
    assert again["partialFingerprints"] != first["runs"][1]["results"][0]["partialFingerprints"]


def assert_every_rule_id_described(doc: dict) -> None:
    """What GitHub code scanning needs of each run: every result's (and notification's) rule is in
    `tool.driver.rules`, and its index points at that descriptor."""
    for run in doc["runs"]:
        rules = run["tool"]["driver"]["rules"]
        ids = [r["id"] for r in rules]
        assert len(ids) == len(set(ids))
        for result in run["results"]:
            assert result["ruleId"] in ids, result["ruleId"]
            assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        for note in run["invocations"][0].get("toolConfigurationNotifications", []):
            assert rules[note["associatedRule"]["index"]]["id"] == note["associatedRule"]["id"]


@needs_genuine
def test_every_result_of_doctor_and_check_serve_has_its_rule_descriptor(cwd: Path) -> None:
    copies = defective_copies(Path("."))
    doctor_doc = json.loads(render_many([doctor(str(p), headers_only=True) for p in copies.values()], "sarif"))
    assert sarif_errors(doctor_doc) == []
    assert_every_rule_id_described(doctor_doc)
    assert any(n for run in doctor_doc["runs"] for n in run["invocations"][0].get("toolConfigurationNotifications", []))

    serve = [sys.executable, "-m", "ckpt_tools.cli.main", "check-serve", "nan", "-f", "sarif", "--"]
    command = ["vllm", "serve", "nan", "--quantization", "fp8", "--no-such-flag", "--max-model-len", "99999999"]
    out = subprocess.run([*serve, *command], capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    assert sarif_errors(doc) == []
    assert_every_rule_id_described(doc)
    [run] = doc["runs"]
    codes = {r["ruleId"] for r in run["results"]}
    assert {"CS101", "CS110", "CS120"} <= codes and any(c.startswith("CK") for c in codes)
    cs101 = run["tool"]["driver"]["rules"][next(r["ruleIndex"] for r in run["results"] if r["ruleId"] == "CS101")]
    assert cs101["name"] == "unknown-flag" and "ckpt explain CS101" in cs101["help"]["text"]
    assert "serve" in cs101["properties"]["tags"]


def test_rule_metadata_carries_help_and_levels() -> None:
    doc = sarif.sarif_log([])
    for rule in all_rules():
        desc = sarif._rule_descriptor(rule)
        assert desc["id"] == rule.code
        assert desc["name"] == rule.slug
        assert desc["shortDescription"]["text"] == rule.title
        assert desc["defaultConfiguration"]["level"] == sarif.LEVELS[rule.severity]
        for heading in ("What it catches", "Why it matters", "Fix"):
            assert heading in desc["help"]["text"] and f"**{heading}**" in desc["help"]["markdown"]
        assert f"ckpt explain {rule.code}" in desc["help"]["text"]
    assert sarif_errors(doc) == [] and doc["runs"] == []


def _synthetic(target: str, hub: dict | None = None) -> Report:
    findings = tuple(
        Finding(
            code="CK104",
            slug="invalid-header",
            severity=sev,
            message=f"{sev} finding",
            files=("model.safetensors",),
            tensors=("model.layers.0.mlp",),
            count=1,
        )
        for sev in ("error", "warning", "info")
    )
    checkpoint = {
        "producer": "none",
        "quant_algo": None,
        "vllm_quantization": None,
        "activation_mode": None,
        "architecture": None,
        "model_type": None,
        "shards": 1,
        "tensors": 1,
        "bytes": 10,
        "kv_cache": None,
        "components": ["text"],
    }
    return Report(
        target=target,
        checkpoint=checkpoint,
        findings=findings,
        skipped=({"code": "CK501", "slug": "nan-fp8-scale", "reason": "--headers-only"},),
        suppressed=(
            {
                "code": "CK401",
                "slug": "nvfp4-weight-only",
                "reason": "weight-only on purpose",
                "severity": "warning",
                "files": ["model.safetensors"],
            },
        ),
        extra={"hub": hub} if hub else {},
    )


SHA = "0123456789abcdef0123456789abcdef01234567"
HUB = {"repo_id": "acme/llama-nvfp4", "revision": "refs/pr/1", "commit": SHA, "endpoint": "https://huggingface.co"}


@pytest.mark.parametrize(
    ("target", "hub", "uri", "base_id"),
    [
        ("models/llama", None, "models/llama/model.safetensors", "%SRCROOT%"),
        ("./models/llama/", None, "models/llama/model.safetensors", "%SRCROOT%"),
        ("models/llama/model.safetensors", None, "models/llama/model.safetensors", "%SRCROOT%"),
        (".", None, "model.safetensors", "%SRCROOT%"),
        ("/data/my model", None, "file:///data/my%20model/model.safetensors", None),
        # A Hub report carries the commit it read: URIs are permalinks to that commit.
        (
            "acme/llama-nvfp4@refs/pr/1",
            HUB,
            f"https://huggingface.co/acme/llama-nvfp4/blob/{SHA}/model.safetensors",
            None,
        ),
    ],
)
def test_artifact_uris_follow_the_target(target: str, hub: dict | None, uri: str, base_id: str | None) -> None:
    doc = json.loads(_synthetic(target, hub).render("sarif"))
    assert sarif_errors(doc) == []
    run = doc["runs"][0]
    art = run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert art["uri"] == uri
    assert art.get("uriBaseId") == base_id
    assert [r["level"] for r in run["results"]] == ["error", "warning", "note", "warning"]
    assert run["results"][0]["locations"][0]["logicalLocations"][0]["kind"] == "module"
    suppressed = run["results"][-1]
    assert suppressed["suppressions"] == [{"kind": "external", "justification": "weight-only on purpose"}]
    (note,) = run["invocations"][0]["toolConfigurationNotifications"]
    assert note["associatedRule"]["id"] == "CK501" and "--headers-only" in note["message"]["text"]


def test_hub_fingerprints_ignore_the_commit() -> None:
    """The same defect in the next commit of a Hub repo is the same alert."""
    first = json.loads(_synthetic("acme/llama-nvfp4", HUB).render("sarif"))["runs"][0]["results"]
    moved = dict(HUB, commit="f" * 40)
    second = json.loads(_synthetic("acme/llama-nvfp4", moved).render("sarif"))["runs"][0]["results"]
    assert [r["partialFingerprints"] for r in first] == [r["partialFingerprints"] for r in second]
    other = json.loads(_synthetic("acme/other", dict(HUB, repo_id="acme/other")).render("sarif"))["runs"][0]["results"]
    assert first[0]["partialFingerprints"] != other[0]["partialFingerprints"]


# ---- JSON -----------------------------------------------------------------------------------------------------------


def test_the_report_schema_rejects_what_the_contract_forbids() -> None:
    good = _synthetic("m").to_dict()
    assert report_errors(good) == []
    for breakage in (
        lambda d: d.pop("summary"),
        lambda d: d["findings"][0].__setitem__("slug", "Invalid Header"),
        lambda d: d["findings"][0].__setitem__("severity", "fatal"),
        lambda d: d["findings"][0].pop("fix"),
        lambda d: d["findings"][0].__setitem__("fix", "rm -rf /"),
        lambda d: d["checkpoint"].__setitem__("producer", "gguf"),  # awq, gptq, ... joined the enum (issue 13)
        lambda d: d["checkpoint"].__setitem__("shards", -1),
        lambda d: d.__setitem__("schema_version", 2),
    ):
        doc = json.loads(json.dumps(good))
        breakage(doc)
        assert report_errors(doc), breakage


@needs_genuine
def test_json_report_validates_for_every_genuine_fixture(genuine: str) -> None:
    doc = json.loads(doctor(GENUINE / genuine).render("json"))
    assert report_errors(doc) == []


@needs_genuine
def test_json_reports_of_defective_checkpoints_validate(cwd: Path) -> None:
    copies = defective_copies(Path("."))
    docs = json.loads(render_many([doctor(str(p)) for p in copies.values()], "json"))
    assert isinstance(docs, list) and len(docs) == len(copies)
    for (slug, _path), doc in zip(copies.items(), docs, strict=True):
        assert report_errors(doc) == []
        assert slug in {f["slug"] for f in doc["findings"]}
    headers_only = doctor(str(copies["nan-fp8-scale"]), headers_only=True).to_dict()
    assert report_errors(headers_only) == []
    assert {s["slug"] for s in headers_only["skipped_rules"]} >= {"nan-fp8-scale"}


# ---- Markdown -------------------------------------------------------------------------------------------------------


def test_markdown_escapes_table_breakers_and_summarises() -> None:
    finding = Finding(
        code="CK304",
        slug="quant-config-mismatch",
        severity="error",
        message="a | b\nc <script>",
        files=("config.json", "hf_quant_config.json"),
        tensors=("model.`odd`.weight",),
        count=3,
        fix="ckpt fix-config 'a|b'",
    )
    report = Report(
        target="m",
        checkpoint=_synthetic("m").checkpoint,
        findings=(finding,),
        skipped=({"code": "CK501", "slug": "nan-fp8-scale", "reason": "--headers-only"},),
    )
    text = report.render("markdown")
    row = next(line for line in text.splitlines() if line.startswith("| ❌"))
    assert row.count(" | ") == 4  # five cells, none split by the message's pipe
    assert "a \\| b c &lt;script>" in row and "`ckpt fix-config 'a\\|b'`" in row
    assert "- ``model.`odd`.weight``" in text  # a backtick in a name does not end the code span
    assert "- … and 2 more" in text
    assert "Files: `config.json`, `hf_quant_config.json`" in text
    assert text.splitlines()[2].startswith("❌ **1 error(s)**")
    assert "_Not run: CK501 (--headers-only)._" in text


@needs_genuine
def test_markdown_verdicts(cwd: Path) -> None:
    assert "✅ **no errors or warnings**" in doctor(GENUINE / "modelopt-llama-nvfp4").render("markdown")
    assert "⚠️ **1 warning(s)**" in doctor(GENUINE / "modelopt-llama-w4a16-nvfp4").render("markdown")
    text = doctor(GENUINE / "base-llama-bf16").render("markdown")
    assert "| vLLM `--quantization` | — (not quantized) |" in text


def test_render_rejects_unknown_formats() -> None:
    from ckpt_tools.errors import UsageError

    with pytest.raises(UsageError, match="unknown format 'yaml'"):  # a CkptError, like every bad API input
        _synthetic("m").render("yaml")
