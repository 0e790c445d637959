"""Rule codes and slugs are spelled once, on the rule class: code outside `ckpt_tools/rules/` (and, for the CS serve
checks, `ckpt_tools/serve/checks/`) names a rule through its class (`OrphanScale.slug`), so renaming or splitting a
rule cannot leave a stale string behind."""

from __future__ import annotations

import ast
from pathlib import Path

from ckpt_tools.docs import every_check

PACKAGE = Path(__file__).resolve().parents[2] / "ckpt_tools"
NAMES = {r.slug for r in every_check()} | {r.code for r in every_check()}
HOMES = (("rules",), ("serve", "checks"))  # where the classes live, and their shared helpers

# (file, literal) pairs allowed for a reason. The load model sits below the rules (the CK60x rules apply it), so it
# names the catalogue rules that own a defect by slug; tests/load/test_findings.py checks each is a registered rule.
KNOWN: set[tuple[str, str]] = {
    ("load/model.py", slug)
    for slug in (
        "misnested-prefix",
        "kv-scale-naming",
        "ignore-list-mismatch",
        "orphan-scale",
        "quant-config-mismatch",
        "nvfp4-weight-only",
        "moe-expert-missing-scale",
        "scale-shape-mismatch",
        "packed-layout-mismatch",
    )
}


def docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants (documentation may name a rule: `ckpt explain CK401`)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    skip = docstrings(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES
        if id(node) not in skip
    ]


def test_no_rule_code_or_slug_literal_outside_the_rules() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{line}: {value!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if not any(path.relative_to(PACKAGE).parts[: len(home)] == home for home in HOMES)
        for line, value in literals(path)
        if (str(path.relative_to(PACKAGE)), value) not in KNOWN
    ]
    assert not found, "use the rule class (`Rule.slug` / `Rule.code`):\n" + "\n".join(found)


def test_the_check_sees_a_literal(tmp_path: Path) -> None:
    """The scan itself works: a comparison with a slug literal is found, a docstring mentioning one is not."""
    probe = tmp_path / "probe.py"
    probe.write_text('"""orphan-scale"""\n\ndef f(x):\n    """misnested-prefix"""\n    return x == "orphan-scale"\n')
    assert literals(probe) == [(5, "orphan-scale")]
