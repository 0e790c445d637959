"""The checkpoints the conformance run judges: every genuine and defective fixture, and every corrupted copy the
tests make (the rule case files tests/rule_cases/*.toml through tests/case_ops.py, and the config-level recipes of
tests/config_recipes.py). Nothing here invents a corruption of its own."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Case:
    name: str
    origin: str  # "genuine", "defective", "rule-case", "recipe"
    fixture: Path  # the folder the case starts from
    corrupt: Callable[[Path], None] | None = field(default=None, compare=False)

    def materialize(self, workdir: Path) -> Path:
        """The folder to judge: the fixture itself, or a corrupted copy of it under workdir."""
        if self.corrupt is None:
            return self.fixture
        dest = workdir / self.name.replace("/", "_").replace(" ", "_")
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(self.fixture, dest)
        for p in dest.iterdir():
            p.chmod(0o644)
        self.corrupt(dest)
        return dest


def _folders(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and any(p.glob("*.safetensors")))


def _importable(modules: list[str]) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def rule_cases(repo: Path) -> list[Case]:
    """One case per `[[case]]` with corruption steps in tests/rule_cases/*.toml (absent on older checkouts)."""
    cases_dir = repo / "tests" / "rule_cases"
    if not cases_dir.is_dir() or not (repo / "tests" / "case_ops.py").exists():
        return []
    from tests import case_ops  # the repo root is on sys.path (run.py)

    out = []
    for path in sorted(cases_dir.glob("*.toml")):
        data = tomllib.loads(path.read_text())
        for i, case in enumerate(data.get("case", [])):
            steps = case.get("steps") or []
            if not steps or not _importable(list(case.get("requires", []))):
                continue  # no steps: the untouched fixture, already a genuine case

            def corrupt(folder: Path, steps: list[dict[str, Any]] = steps) -> None:
                case_ops.apply(folder, steps)

            out.append(
                Case(f"{path.stem}#{i + 1}", "rule-case", repo / "fixtures" / "genuine" / case["fixture"], corrupt)
            )
    return out


def recipe_cases(repo: Path) -> list[Case]:
    if not (repo / "tests" / "config_recipes.py").exists():
        return []
    from tests.config_recipes import RECIPES

    return [Case(f"recipe:{r.name}", "recipe", repo / "fixtures" / "genuine" / r.fixture, r.apply) for r in RECIPES]


def all_cases(repo: Path = REPO) -> list[Case]:
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    genuine = [Case(p.name, "genuine", p) for p in _folders(repo / "fixtures" / "genuine")]
    defective = [Case(f"defective:{p.name}", "defective", p) for p in _folders(repo / "fixtures" / "defective")]
    return genuine + defective + recipe_cases(repo) + rule_cases(repo)
