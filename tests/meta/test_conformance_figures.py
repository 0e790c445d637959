"""The conformance figures the README and docs/conformance.md quote are the last run's: bench/conformance/load_agree.md,
which `load_agree.py` writes (it needs the vLLM side venv, so the run is not part of CI; re-running it and forgetting
the pages fails here)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = (ROOT / "bench" / "conformance" / "load_agree.md").read_text(encoding="utf-8")
ORIGINS = {  # load_agree.md's origin -> docs/conformance.md's row
    "genuine": "genuine fixtures",
    "defective": "defective fixtures",
    "recipe": "config recipes",
    "rule-case": "rule cases",
}


def the_run() -> tuple[tuple[int, int], dict[str, tuple[int, int]], dict[str, int]]:
    """(agreeing, cases), per origin (agreeing, cases) and cases per cause, as load_agree.md records them."""
    title = re.search(r"^# .*?: (\d+) / (\d+) cases agree", RUN, re.M)
    assert title, "load_agree.md lost its title line"
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in RUN.splitlines() if line.startswith("| ")]
    header, *cases = rows
    origin, agree = header.index("origin"), header.index("agree")
    total, agreeing = Counter(r[origin] for r in cases), Counter(r[origin] for r in cases if r[agree] == "yes")
    causes = {c: int(n) for c, n in re.findall(r"^- \*\*([\w-]+)\*\* \((\d+) case\(s\)\)", RUN, re.M)}
    assert (sum(agreeing.values()), len(cases)) == (int(title.group(1)), int(title.group(2)))
    return (int(title.group(1)), int(title.group(2))), {o: (agreeing[o], total[o]) for o in total}, causes


def test_the_readme_quotes_the_last_run() -> None:
    (agreeing, cases), by_origin, _ = the_run()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quoted = re.search(
        r"on (\d+) of (\d+) conformance cases \(genuine fixtures (\d+)/(\d+)\)", readme.replace("\n", " ")
    )
    assert quoted, "the README lost its conformance figure"
    assert tuple(map(int, quoted.groups())) == (agreeing, cases, *by_origin["genuine"])


def test_docs_conformance_quotes_the_last_run() -> None:
    (agreeing, cases), by_origin, causes = the_run()
    page = (ROOT / "docs" / "conformance.md").read_text(encoding="utf-8")
    result = re.search(r"\*\*Result \(vLLM [\d.]+, run [\d-]+\): (\d+) / (\d+) cases agree\.\*\*", page)
    assert result and tuple(map(int, result.groups())) == (agreeing, cases)
    table = dict(re.findall(r"^\| ([a-z ]+) \| (\d+ / \d+) \|$", page, re.M))
    assert {ORIGINS[o]: f"{a} / {n}" for o, (a, n) in by_origin.items()} == table
    listed = sorted(int(n) for n in re.findall(r"^\* every .*?(\d+)\)[;.]$", page, re.M))  # the cases by origin
    assert listed == sorted(n for _, n in by_origin.values())
    quoted = {c: int(n) for c, n in re.findall(r"^\| ([a-z-]+) \| (\d+) \| ", page, re.M)}
    assert quoted == causes
