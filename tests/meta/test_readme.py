"""The README is the tool's real behaviour: its console examples are real output (tools/readme_examples.py, which
`--write`s them back after an output change), its counts are the catalogue's, and every Python block in it runs as
printed (the `api-example` and `serve-api-example` tests in tests/cli/test_python_gate.py)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from ckpt_tools.docs import every_check
from ckpt_tools.rules.base import all_rules

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
sys.path.insert(0, str(ROOT / "tools"))
import readme_examples  # noqa: E402

EXAMPLES = readme_examples.examples(README)


def test_the_readme_has_few_console_examples() -> None:
    assert 3 <= len(EXAMPLES) <= 5


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.commands[0])
def test_a_console_example_is_the_real_output(example: readme_examples.Example) -> None:
    assert example.text(readme_examples.run(example)) == example.text(), (
        "the README's example drifted from the real output: python tools/readme_examples.py --write"
    )


def test_a_drifted_example_is_found_and_written_back(tmp_path: Path) -> None:
    """The comparison can fail: an edited output is reported (exit 1) and `--write` restores the real one."""
    page = tmp_path / "README.md"
    first = EXAMPLES[0]
    original = README[first.start : first.end]
    page.write_text(README.replace(original, original.replace(" error(s)", " errors"), 1), encoding="utf-8")
    assert readme_examples.main([str(page)]) == 1
    assert readme_examples.main(["--write", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == README


def test_the_readme_counts_are_the_catalogues() -> None:
    rules = len(list(all_rules()))
    checks = len(every_check()) - rules
    counts = re.search(r"<!-- rule-counts -->\n.*?runs (\d+) rules.*?adds (\d+) serve checks", README, re.S)
    assert counts, "README lost its rule counts"
    assert (int(counts.group(1)), int(counts.group(2))) == (rules, checks)


def test_every_python_block_of_the_readme_is_run_by_a_test() -> None:
    blocks = re.findall(r"(<!-- [a-z-]+ -->\n)?```python\n", README)
    assert sorted(blocks) == ["<!-- api-example -->\n", "<!-- serve-api-example -->\n"]


def test_every_link_of_the_readme_and_docs_leads_somewhere() -> None:
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []


def test_docs_name_every_value_rule() -> None:
    """docs/doctor.md lists the rules the value scan feeds; the list is the catalogue's `needs_values` rules."""
    page = (ROOT / "docs" / "doctor.md").read_text(encoding="utf-8")
    listed = re.search(r"<!-- value-rules -->\n(.*?)\n\n", page, re.S)
    assert listed, "docs/doctor.md lost its list of value rules"
    named = set(re.findall(r"CK\d{3}\s+`([a-z0-9-]+)`", listed.group(1)))
    assert named == {rule.slug for rule in all_rules() if rule.needs_values}


def test_docs_name_every_output_format() -> None:
    """docs/doctor.md's `--format` row, the one list of formats the user docs give, is report/renderers.py's."""
    from ckpt_tools.report.renderers import OUTPUT_FORMATS

    page = (ROOT / "docs" / "doctor.md").read_text(encoding="utf-8")
    row = re.search(r"^\| `--format ([a-z\\|]+)` \|", page, re.M)
    assert row, "docs/doctor.md lost its --format row"
    assert row.group(1).split("\\|") == list(OUTPUT_FORMATS)
