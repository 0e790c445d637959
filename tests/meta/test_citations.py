"""Every `source` a user sees names something public (issue 12): no shipped file cites notes that do not ship, and
the repository's own restatements (docs/reference/) exist for every section cited."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [
    ROOT / "README.md",
    *sorted((ROOT / "ckpt_tools").rglob("*.py")),
    *sorted((ROOT / "rules").rglob("*")),
    *sorted((ROOT / "docs").rglob("*")),
]
UNSHIPPED = re.compile(
    r"vllm-facts|failure-catalogue|hub-offline|vllm-meta-load|(?<!docs/reference/)producers\.md|shared/"
)


@pytest.mark.parametrize("path", [p for p in SHIPPED if p.is_file()], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_citation_of_notes_that_do_not_ship(path: Path) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    hits = [m.group(0) for m in UNSHIPPED.finditer(text)]
    assert not hits, f"{path.relative_to(ROOT)} cites {sorted(set(hits))}"


def test_every_cited_reference_section_exists() -> None:
    sections = {}
    for page in (ROOT / "docs" / "reference").glob("*.md"):
        sections[page.name] = set(re.findall(r"^### (\d+\.\d+) ", page.read_text(encoding="utf-8"), re.M))
    cited = set()
    for path in SHIPPED:
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            cited |= set(re.findall(r"docs/reference/([\w.-]+\.md) §(\d+\.\d+)", text))
    missing = sorted(f"{page} §{sec}" for page, sec in cited if sec not in sections.get(page, set()))
    assert cited and not missing, missing


def test_sources_users_see_name_public_things() -> None:
    from ckpt_tools.serve import serve_flags

    plan = serve_flags(str(ROOT / "fixtures" / "genuine" / "modelopt-llama-nvfp4"), hardware="gb10")
    for flag in plan.flags:
        assert not UNSHIPPED.search(flag.source), flag
    assert any("vLLM 0.33.0" in f.source for f in plan.flags)
