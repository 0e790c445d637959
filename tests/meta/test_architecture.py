"""docs/architecture.md shows the house as it is: every package and module of ckpt_tools/ is named in its package's
paragraph, and every file the page names exists.

A package's paragraph starts with its name in bold (**`read/`**); a module is named there by its file name
(`hub_http.py` or `hub_http`; `checks/base.py` or `base.py` for a sub-package's module). Top-level modules are named anywhere under "The
packages". The modules the code finds by itself are exempt: rules and serve checks (their catalogue documents them)
and the output formats (their list in report/renderers.py)."""

from __future__ import annotations

import re
from pathlib import Path

from ckpt_tools.report.renderers import OUTPUT_FORMATS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ckpt_tools"
PAGE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
REGISTERED = re.compile(r"(ck|cs)\d{3}_\w+\.py")
FILE = re.compile(r"(?<![\w/.<*-])([\w/]*\w\.py)\b")
PARAGRAPH = re.compile(r"^\*\*`([\w/.]+)`\*\*", re.M)


def packages_chapter(page: str) -> str:
    return page.split("## The packages", 1)[1].split("\n## ", 1)[0]


def paragraphs(page: str) -> dict[str, str]:
    """Package or top-level module named in bold -> its paragraph (up to the next bold name)."""
    chapter = packages_chapter(page)
    starts = list(PARAGRAPH.finditer(chapter))
    return {
        m.group(1): chapter[m.start() : starts[i + 1].start() if i + 1 < len(starts) else len(chapter)]
        for i, m in enumerate(starts)
    }


def exempt(path: Path) -> bool:
    if path.name == "__init__.py":
        return path.parent != PACKAGE  # a package is named as `name/`; the root's is the public API
    if REGISTERED.fullmatch(path.name):
        return True
    return path.parent == PACKAGE / "report" and path.stem in OUTPUT_FORMATS.values()


def unnamed(page: str) -> list[str]:
    """The packages and modules of ckpt_tools/ the page does not name where it should."""
    sections = paragraphs(page)
    chapter = packages_chapter(page)
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if exempt(path):
            continue
        parts = path.relative_to(PACKAGE).parts
        if len(parts) == 1:
            if f"`{path.name}`" not in chapter:
                missing.append(path.name)
            continue
        top, inside = parts[0], "/".join(parts[1:])
        text = sections.get(f"{top}/")
        if text is None:
            missing.append(f"{top}/")
        elif not any(f"`{name}`" in text for name in (inside, inside.removesuffix(".py"), parts[-1])):
            missing.append(f"{top}/{inside}")
    for package in sorted(p.parent for p in PACKAGE.glob("*/*/__init__.py")):
        top, sub = package.relative_to(PACKAGE).parts
        if f"`{sub}/`" not in sections.get(f"{top}/", ""):
            missing.append(f"{top}/{sub}/")
    return sorted(set(missing))


def unknown(page: str) -> list[str]:
    """The .py files the page names that do not exist (read in the package paragraph they appear in first)."""
    sections = paragraphs(page)
    located = {name: text for name, text in sections.items() if name.endswith("/")}
    missing = []
    for name in sorted(set(FILE.findall(page))):
        homes = [PACKAGE / p for p, text in located.items() if f"`{name}`" in text or f" {name}" in text]
        candidates = [ROOT / name, PACKAGE / name, *(home / name for home in homes)]
        if not any(c.is_file() for c in candidates):
            missing.append(name)
    return missing


def test_every_package_and_module_is_named_in_its_paragraph() -> None:
    assert unnamed(PAGE) == [], "name these in docs/architecture.md, in their package's paragraph"


def test_every_file_the_page_names_exists() -> None:
    assert unknown(PAGE) == [], "docs/architecture.md names files that do not exist"


def test_a_module_left_out_or_made_up_is_found() -> None:
    """Both checks can fail: a module dropped from its paragraph is missing, a module named in the wrong one does not
    count, and a file that does not exist is reported."""
    before, made_up = set(unnamed(PAGE)), set(unknown(PAGE))  # empty unless the tests above fail too
    assert set(unnamed(PAGE.replace("`hub_http.py`", "the HTTP module"))) - before == {"read/hub_http.py"}
    moved = PAGE.replace("`limits.py`", "the limits").replace("**`write/`**", "**`write/`** `limits.py`")
    assert set(unnamed(moved)) - before == {"plan/limits.py"}
    assert set(unnamed(PAGE.replace("**`vllm_dry/`**", "**vllm_dry**"))) - before == {"vllm_dry/"}
    assert set(unknown(PAGE.replace("`hub_info.py`", "`hub_answers.py`"))) - made_up == {"hub_answers.py"}
    assert set(unknown(PAGE + "\nSee `load/findings.py`.\n")) - made_up == {"load/findings.py"}
