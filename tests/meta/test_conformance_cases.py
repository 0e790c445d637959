"""The conformance run's case list (bench/conformance/cases.py) stays in step with the fixtures and the tests'
corruption recipes; the run itself needs the vLLM side venv and is not part of CI."""

from __future__ import annotations

import filecmp
import importlib.util
import sys
from pathlib import Path

import pytest

from tests.config_recipes import RECIPES
from tests.corrupt import GENUINE, genuine_entries

REPO = Path(__file__).resolve().parents[2]


def _cases_module():
    spec = importlib.util.spec_from_file_location("conformance_cases", REPO / "bench" / "conformance" / "cases.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cases():
    return _cases_module().all_cases(REPO)


def test_every_fixture_and_recipe_is_a_case(cases) -> None:
    names = {c.name for c in cases}
    assert set(genuine_entries()) <= names
    defective = [p.name for p in (REPO / "fixtures" / "defective").iterdir() if p.is_dir()]
    assert defective and {f"defective:{d}" for d in defective} <= names
    assert {f"recipe:{r.name}" for r in RECIPES} <= names


def test_every_rule_case_with_steps_is_a_case(cases) -> None:
    import tomllib

    expected = 0
    for path in sorted((REPO / "tests" / "rule_cases").glob("*.toml")):
        for case in tomllib.loads(path.read_text()).get("case", []):
            if case.get("steps") and all(importlib.util.find_spec(m) for m in case.get("requires", [])):
                expected += 1
    rule_cases = [c for c in cases if c.origin == "rule-case"]
    assert expected and len(rule_cases) == expected
    assert all(c.fixture.parent == GENUINE and c.fixture.is_dir() for c in rule_cases)


def test_a_case_materializes_a_corrupted_copy(cases, tmp_path) -> None:
    case = next(c for c in cases if c.name == "recipe:hf-quant-config-only")
    folder = case.materialize(tmp_path)
    assert folder != case.fixture and folder.parent == tmp_path
    assert not filecmp.cmp(folder / "config.json", case.fixture / "config.json", shallow=False)
    genuine = next(c for c in cases if c.origin == "genuine")
    assert genuine.materialize(tmp_path) == genuine.fixture  # untouched fixtures are judged in place
