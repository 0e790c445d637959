"""The catalogue checks itself: every rule (CK) and serve check (CS) has docs, a failing and a passing case, a unique
code and slug; the generated docs/rules.md is current; `ckpt rules` / `ckpt explain` show every one; catalogue data
carry sources."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt_tools import docs
from ckpt_tools.knowledge import dtypes, kv_scales, modules, scales
from ckpt_tools.knowledge._load import rules_dir, toml_module, top_keys
from ckpt_tools.rules.base import SEVERITIES, all_rules
from ckpt_tools.serve.checks import all_checks
from tests.rules.test_rule_cases import CASES, CASES_DIR

tomllib = toml_module()

RULES = all_rules()
SERVE_CHECKS = all_checks()
CHECKS = docs.every_check()  # the CK rules, then the CS serve checks: one contract
ROOT = Path(__file__).resolve().parents[2]
REQUIRED_SLUGS = {  # shared/spec/report.md: these slugs must exist
    "lfs-pointer",
    "invalid-header",
    "index-missing-shard",
    "index-tensor-mismatch",
    "misnested-prefix",
    "nvfp4-weight-only",
    "moe-expert-missing-scale",
    "nan-fp8-scale",
    "quant-config-mismatch",
    "unsupported-quant-algo",
    "orphan-scale",
    "ignore-list-mismatch",
    "kv-cache-config-mismatch",
    "tied-embedding-mismatch",
    "scale-shape-mismatch",
    "fused-scale-mismatch",
}


def test_codes_and_slugs_are_unique_and_well_formed() -> None:
    assert [*RULES, *SERVE_CHECKS] == CHECKS and len(SERVE_CHECKS) >= 25
    codes = [r.code for r in CHECKS]
    slugs = [r.slug for r in CHECKS]
    assert len(set(codes)) == len(codes)
    assert len(set(slugs)) == len(slugs)
    for r in CHECKS:
        assert re.fullmatch(r"CK[1-6]\d\d" if r in RULES else r"CS1\d\d", r.code), r.code
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", r.slug), r.slug
        assert r.severity in SEVERITIES
        assert r.title and not r.title.endswith(".")
        module = sys.modules[r.__module__].__name__.rsplit(".", 1)[-1]
        assert module == f"{r.code.lower()}_{r.slug.replace('-', '_')}", f"{r.code} lives in {module}"


def test_required_slugs_exist() -> None:
    assert {r.slug for r in RULES} >= REQUIRED_SLUGS


@pytest.mark.parametrize("rule", CHECKS, ids=[r.code for r in CHECKS])
def test_rule_is_documented(rule) -> None:
    doc = rule.doc_sections()
    assert doc["summary"], f"{rule.code} has no summary line"
    for heading in docs.SECTIONS:
        assert len(doc.get(heading, "")) > 20, f"{rule.code} lacks a '{heading}' section"
    if rule in SERVE_CHECKS:  # their sources were data before: each still cites one
        assert len(doc.get("Source", "")) > 20, f"{rule.code} lacks a 'Source' section"


@pytest.mark.parametrize("rule", CHECKS, ids=[r.code for r in CHECKS])
def test_rule_has_failing_and_passing_cases(rule) -> None:
    path = CASES_DIR / f"{rule.slug}.toml"
    assert path.exists(), f"no case file {path.name} for {rule.code}"
    kinds = [c["kind"] for code, c in CASES if code == rule.code]
    assert "fail" in kinds, f"{rule.code} has no failing case"
    assert "pass" in kinds, f"{rule.code} has no passing case"
    mine = [c for code, c in CASES if code == rule.code]
    if rule in SERVE_CHECKS:
        # A serve check judges a command: every case names the one it runs check-serve on.
        assert all(c.get("command") for c in mine), f"{rule.code}: a case without a `command`"
        return
    assert not any("command" in c for c in mine), f"{rule.code}: a `command` is only judged by CS checks"
    # Failing cases start from genuine producer fixtures; at least one must corrupt it.
    assert any(c.get("steps") for c in mine if c["kind"] == "fail"), (
        f"{rule.code}: every failing case is an untouched fixture; add one built by a corruption recipe"
    )


def test_every_case_file_names_a_registered_rule() -> None:
    for path in CASES_DIR.glob("*.toml"):
        rule = docs.find_check(path.stem)
        assert rule is not None, f"{path.name} names no rule slug"
        assert all(code == rule.code for code, c in CASES if c["_file"] == path.name), path.name
    for _code, case in CASES:
        assert case["kind"] in ("fail", "pass") and case.get("name") and case.get("fixture"), case


def test_docs_rules_md_is_current() -> None:
    committed = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    assert committed == docs.render(), "docs/rules.md is stale: run `python -m ckpt_tools.docs`"


def test_docs_check_flag(tmp_path: Path) -> None:
    stale = tmp_path / "rules.md"
    stale.write_text("old\n")
    assert docs.main(["--check", "--path", str(stale)]) == 1
    assert docs.main(["--path", str(stale)]) == 0
    assert docs.main(["--check", "--path", str(stale)]) == 0


def _ckpt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ckpt_tools.cli.main", *args], capture_output=True, text=True)


def test_cli_rules_lists_every_rule() -> None:
    out = _ckpt("rules")
    assert out.returncode == 0
    for r in CHECKS:
        assert re.search(rf"^{r.code}\s+{re.escape(r.slug)}\s+{r.severity}", out.stdout, re.M), r.code


@pytest.mark.parametrize(
    ("key", "head"),
    [
        ("CK402", "CK402 moe-expert-missing-scale (error)"),
        ("ck402", "CK402 moe-expert-missing-scale (error)"),
        ("moe-expert-missing-scale", "CK402 moe-expert-missing-scale (error)"),
        ("CS120", "CS120 max-model-len-exceeded (error, ckpt check-serve)"),
        ("cs120", "CS120 max-model-len-exceeded (error, ckpt check-serve)"),
        ("memory-does-not-fit", "CS172 memory-does-not-fit (error, ckpt check-serve)"),
    ],
)
def test_cli_explain_by_code_or_slug(key: str, head: str) -> None:
    out = _ckpt("explain", key)
    assert out.returncode == 0
    assert out.stdout.startswith(head + "\n\n")
    rule = docs.find_check(key)
    assert rule is not None
    doc = rule.doc_sections()
    assert out.stdout.splitlines()[2] == doc["summary"]
    for heading in (*docs.SECTIONS, *(["Source"] if key.lower().startswith(("cs", "memory")) else [])):
        assert f"\n{heading}\n" in out.stdout
        assert "\n".join("  " + line if line else "" for line in doc[heading].splitlines()) in out.stdout


def test_docs_rules_md_documents_serve_checks() -> None:
    text = docs.render()
    assert "## CS1xx: serve commands" in text
    for check in SERVE_CHECKS:
        assert f"| {check.code} | [`{check.slug}`](#{check.code.lower()}-{check.slug}) |" in text
        assert f"### {check.code} `{check.slug}`" in text
    section = text[text.index("### CS120 `max-model-len-exceeded`") :]
    assert "reported by `ckpt check-serve`" in section.split("###")[1]
    assert "**Source**" in section.split("###")[1]


def test_cli_explain_unknown_rule_is_usage_error() -> None:
    out = _ckpt("explain", "CK999")
    assert out.returncode == 2
    assert out.stderr.startswith("ckpt: no rule 'CK999'")


# ---- catalogue data -------------------------------------------------------------------------------------------------

DATA_FILES = {
    "modules.toml": "modules/1",
    "scales.toml": "scales/1",
    "kv_scales.toml": "kv-scales/1",
    "layouts.toml": "layouts/1",
    "dtypes.toml": "dtypes/1",
    "formats.toml": "formats/1",
}


@pytest.mark.parametrize("name", sorted(DATA_FILES))
def test_data_file_schema_and_sources(name: str) -> None:
    data = tomllib.loads((rules_dir() / name).read_text(encoding="utf-8"))
    assert data["schema"] == DATA_FILES[name]
    entries = [e for v in data.values() if isinstance(v, list) for e in v if isinstance(e, dict)]
    entries += [v for v in data.values() if isinstance(v, dict)]
    assert entries
    for entry in entries:
        assert _sourced(entry), f"{name}: entry without a source: {entry}"
    assert f"`{name}`" in (rules_dir() / "README.md").read_text(), f"rules/README.md does not document {name}"


def _sourced(entry: dict) -> bool:
    """An entry cites a source itself, or every sub-entry it groups does (dtype readers, per-runtime tables)."""
    if entry.get("source"):
        return True
    children = [c for v in entry.values() for c in (v if isinstance(v, list) else [v]) if isinstance(c, dict)]
    return bool(children) and all(_sourced(c) for c in children)


def test_typed_views_load() -> None:
    assert {g.fused for g in modules.fused_groups()} >= {"qkv_proj", "gate_up_proj"}
    assert modules.parallel().tp_candidates[0] == 1
    assert all(s.weight.required for s in scales.schemes())
    assert kv_scales.classify("model.layers.0.self_attn.k_proj.k_scale").id == "modelopt-proj"
    assert kv_scales.classify("model.layers.0.self_attn.k_scale").id == "compressed-tensors-self-attn"
    assert kv_scales.classify("model.layers.0.self_attn.kv_scale").status == "deprecated"
    assert not kv_scales.is_kv_scale_name("model.layers.0.self_attn.o_proj.output_scale")
    assert dtypes.dtype_support()["F8_E8M0"].report
    assert scales.global_scale_conventions() == {
        "weight_scale_2": "direct",
        "input_scale": "direct",
        "weight_global_scale": "reciprocal",
        "input_global_scale": "reciprocal",
    }


def test_runtime_ids_are_read_without_parsing_every_profile(tmp_path: Path) -> None:
    """Runtime profile ids come from each file's top-level keys only; the answer is the whole file's, also when a
    line inside a multi-line value opens with `[`."""
    for p in sorted((rules_dir() / "runtimes").glob("*.toml")):
        text = p.read_text(encoding="utf-8")
        assert top_keys(p.name, text).get("id") == tomllib.loads(text)["id"]
    assert top_keys("tricky", 'x = [\n[1, 2],\n]\nid = "late"\n[table]\nid = "inner"\n')["id"] == "late"
    assert "id" not in top_keys("plain", 'name = "n"\n[table]\nid = "inner"\n')
