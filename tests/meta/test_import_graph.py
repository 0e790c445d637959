"""The lines the structure must keep (docs/architecture.md, "Lines the structure keeps"), checked on the import graph
of the library: every import, at module level or inside a function, except those made for type checkers only."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "ckpt_tools"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            inside.update(id(sub) for sub in ast.walk(node))
    return inside


def _imported(path: Path, modules: frozenset[str]) -> Iterator[tuple[str, int]]:
    """(module imported, line) for every import in `path` that names a module of the package."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for_type_checkers = _type_checking_nodes(tree)
    for node in ast.walk(tree):
        if id(node) in for_type_checkers:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            source = ".".join([*base, node.module] if node.module else base)
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
        else:
            continue
        for target in targets:
            while target not in modules and "." in target:
                target = target.rpartition(".")[0]
            if target in modules and target != name:
                yield target, node.lineno


@cache
def graph() -> dict[str, dict[str, int]]:
    """Module -> {module it imports: the line of the first such import}."""
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = frozenset(_module_name(p) for p in paths)
    out: dict[str, dict[str, int]] = {}
    for path in paths:
        edges = out.setdefault(_module_name(path), {})
        for target, line in _imported(path, modules):
            edges.setdefault(target, line)
    return out


def _in(module: str, *layers: str) -> bool:
    return any(module == f"ckpt_tools.{layer}" or module.startswith(f"ckpt_tools.{layer}.") for layer in layers)


def _crossings(sources: tuple[str, ...], forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{a} -> {b} (line {line})"
        for a, edges in graph().items()
        if _in(a, *sources)
        for b, line in edges.items()
        if _in(b, *forbidden)
    ]


LINES = {
    "the read path (pipeline, read/) imports nothing from repair/": (("pipeline", "read"), ("repair",)),
    "rules/ and model/ import nothing from read/, cli/, repair/, serve/ or the pipeline": (
        ("rules", "model"),
        ("read", "cli", "repair", "serve", "pipeline"),
    ),
    "plan/ is a library under serve/ and census: it imports neither serve/ nor the pipeline": (
        ("plan",),
        ("serve", "pipeline", "census", "memory_plan"),
    ),
    "knowledge/ (the data tables) imports no layer that applies it": (
        ("knowledge",),
        ("detect", "rules", "read", "serve", "repair", "pipeline", "plan", "report", "census"),
    ),
    "report/ renders findings and imports no command layer": (
        ("report",),
        ("read", "repair", "serve", "pipeline", "plan", "cli"),
    ),
}


@pytest.mark.parametrize("line", list(LINES))
def test_layer_line(line: str) -> None:
    sources, forbidden = LINES[line]
    assert _crossings(sources, forbidden) == [], line


def test_nothing_in_the_library_imports_the_cli() -> None:
    library = tuple(m.removeprefix("ckpt_tools.") for m in graph() if not _in(m, "cli") and m != "ckpt_tools")
    assert _crossings(library, ("cli",)) == []


def test_the_version_comes_from_its_own_module() -> None:
    """Every layer may import `ckpt_tools._version`; importing the package root would import the whole API."""
    assert [a for a, edges in graph().items() if "ckpt_tools" in edges] == []


def test_the_import_graph_has_no_cycle() -> None:
    """No module imports itself through others (lazy imports included): each layer can be read, and loaded, alone."""
    edges = graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in edges.get(module, {}):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        state[module] = 2
        path.pop()
        return None

    for module in sorted(edges):
        if module not in state:
            assert visit(module) is None, " -> ".join(path)


def test_the_graph_sees_imports_of_every_kind() -> None:
    """The checks above would pass on an empty graph: the walk must see a module-level import, one inside a function,
    a relative `from . import x`, and skip one made for type checkers only."""
    edges = graph()
    assert "ckpt_tools.model.schemes" in edges["ckpt_tools.detect.schemes"]  # from ..model.schemes import
    assert "ckpt_tools.pipeline" in edges["ckpt_tools.census"]  # inside a function
    assert "ckpt_tools.plan.facts" in edges["ckpt_tools.plan.planner"]  # from . import facts
    assert "ckpt_tools.report.model" not in edges["ckpt_tools.report.json_format"]  # under TYPE_CHECKING
