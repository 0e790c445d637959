"""Conformance with vLLM itself: ckpt's verdicts against vLLM's own code, for every fixture and corrupted copy.

Run with the side venv's python (bench/conformance/setup.sh builds it):

    /work/venv-vllm/bin/python bench/conformance/run.py [--only SUBSTRING] [--out bench/conformance/latest.md]

Checks per case (see bench/conformance/README section in the top-level README):
  1. method: ckpt's `vllm_quantization` / rejection against vLLM's resolved method or error (config or layer stage);
  2. modules: ckpt's per-module scheme table against vLLM's per-layer decisions on a meta-device model build;
  3. serve: every argv `ckpt serve-flags` emits, parsed by vLLM's own `vllm serve` parser and turned into a
     `ModelConfig` for the checkpoint it names.
  4. plan: `ckpt plan`'s per-layer KV bytes per token and recurrent state per sequence against vLLM's own KV-cache
     specs (plan_check.py), for every fixture and the configs of tests/plan_configs.py.
  5. kernels: rules/kernels.toml against vLLM's own kernel selection functions on each GPU capability, where they
     run on CPU (kernel_check.py).
Prints the agreement table and a one-line score; writes the same as Markdown; exits 1 on any disagreement.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import kernel_check  # noqa: E402
import plan_check  # noqa: E402
import vllm_side as vs  # noqa: E402 - sets the CPU platform before vLLM is imported
from cases import Case, all_cases  # noqa: E402
from checks import Cell, check_method, check_modules, check_serve, ckpt_view  # noqa: E402


@dataclass
class Row:
    case: Case
    vllm: str
    ckpt: str
    cells: dict[str, Cell]


CHECKS = ("method", "modules", "serve")


# ---- the run ------------------------------------------------------------------------------------------------------


def judge(case: Case, workdir: Path) -> Row:
    try:
        folder = case.materialize(workdir)
    except Exception as exc:  # noqa: BLE001 - a recipe that no longer applies is a broken case, shown as such
        cell = Cell("DIFF", "case failed", [f"{type(exc).__name__}: {exc}"])
        return Row(case, "-", "-", dict.fromkeys(CHECKS, cell))
    result = ckpt_view(folder)
    verdict = vs.resolve(str(folder))
    build = vs.layer_decisions(str(folder)) if verdict.error is None and verdict.method else None
    method, v_text, c_text = check_method(verdict, build, result)
    cells = {
        "method": method,
        "modules": check_modules(verdict, build, result),
        "serve": check_serve(folder, verdict, build),
    }
    return Row(case, v_text, c_text, cells)


def score(rows: list[Row]) -> tuple[str, bool]:
    parts, clean = [], True
    for check in CHECKS:
        cells = [r.cells[check] for r in rows if r.cells[check].status != "n/a"]
        ok = sum(1 for c in cells if c.status == "ok")
        clean &= ok == len(cells)
        parts.append(f"{check} {ok}/{len(cells)}")
    total = [c for r in rows for c in r.cells.values() if c.status != "n/a"]
    ok = sum(1 for c in total if c.status == "ok")
    pct = 100.0 * ok / len(total) if total else 100.0
    return (
        f"vLLM {vs.VLLM_VERSION} conformance: {ok}/{len(total)} checks agree ({pct:.1f}%) over {len(rows)} "
        f"cases — {', '.join(parts)}"
    ), clean


def table(rows: list[Row]) -> list[str]:
    head = ["case", "origin", "vLLM says", "ckpt says", *CHECKS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [
            f"{c.status} {c.text}".strip() if c.status != "n/a" else f"n/a ({c.text})"
            for c in (r.cells[k] for k in CHECKS)
        ]
        lines.append("| " + " | ".join([r.case.name, r.case.origin, r.vllm, r.ckpt, *cells]).replace("\n", " ") + " |")
    return lines


def details(rows: list[Row]) -> list[str]:
    out = []
    for r in rows:
        for check in CHECKS:
            c = r.cells[check]
            if c.status == "DIFF" or (c.status == "ok" and "differs" in c.text):
                out.append(f"- **{r.case.name}** / {check}: {c.text}")
                out.extend(f"  - {d}" for d in c.details[:12])
                if len(c.details) > 12:
                    out.append(f"  - … {len(c.details) - 12} more")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="judge only cases whose name contains this text")
    ap.add_argument("--out", type=Path, default=HERE / "latest.md", help="Markdown report (default: %(default)s)")
    args = ap.parse_args(argv)
    cases = [c for c in all_cases(REPO) if not args.only or args.only in c.name]
    with tempfile.TemporaryDirectory(prefix="ckpt-conformance-") as tmp:
        rows = [judge(c, Path(tmp)) for c in cases]
    line, clean = score(rows)
    plan_rows = [] if args.only else plan_check.run()
    plan_line, plan_clean = plan_check.score(plan_rows) if plan_rows else ("", True)
    clean &= plan_clean
    kernel_rows = [] if args.only else kernel_check.run()
    kernel_line, kernel_clean = kernel_check.score(kernel_rows) if kernel_rows else ("", True)
    clean &= kernel_clean
    # Corrupted copies live in a fresh temporary folder: name it once, so reports of two runs compare line by line.
    body = [ln.replace(tmp, "<copies>") for ln in table(rows)]
    print("\n".join(body))
    print()
    print(line)
    if plan_line:
        print(plan_line)
    if kernel_line:
        print(kernel_line)
    diffs = [ln.replace(tmp, "<copies>") for ln in details(rows)]
    if diffs:
        print("\n".join(["", "Disagreements and notes:", *diffs]))
    md = [
        "# Conformance with vLLM: latest run",
        "",
        f"{line}",
        "",
        f"Run {dt.date.today().isoformat()} with vLLM {vs.VLLM_VERSION} (side venv, CPU; bench/conformance/setup.sh) "
        f"by `bench/conformance/run.py`. Cases: every fixtures/genuine and fixtures/defective entry, the config "
        f"recipes of tests/config_recipes.py and every rule case with corruption steps in tests/rule_cases/.",
        "",
        *body,
        "",
        "## Disagreements and notes",
        "",
        *(diffs or ["None."]),
        "",
        *(plan_check.section(plan_rows) if plan_rows else []),
        "",
        *(kernel_check.section(kernel_rows) if kernel_rows else []),
    ]
    if not args.only:
        args.out.write_text("\n".join(md))
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
