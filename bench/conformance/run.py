"""Conformance with vLLM itself: ckpt's verdicts against vLLM's own code, for every fixture and corrupted copy.

Run with the side venv's python (bench/conformance/setup.sh builds it):

    /work/venv-vllm/bin/python bench/conformance/run.py [--only SUBSTRING] [--out bench/conformance/latest.md]

Checks per case (see bench/conformance/README section in the top-level README):
  1. method: ckpt's `vllm_quantization` / rejection against vLLM's resolved method or error (config or layer stage);
  2. modules: ckpt's per-module scheme table against vLLM's per-layer decisions on a meta-device model build;
  3. serve: every argv `ckpt serve-flags` emits, parsed by vLLM's own `vllm serve` parser and turned into a
     `ModelConfig` for the checkpoint it names (skipped where this checkout has no `ckpt serve-flags`).
Prints the agreement table and a one-line score; writes the same as Markdown; exits 1 on any disagreement.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import vllm_side as vs  # noqa: E402 - sets the CPU platform before vLLM is imported
from cases import Case, all_cases  # noqa: E402

from ckpt_tools.errors import CkptError  # noqa: E402
from ckpt_tools.pipeline import analyze  # noqa: E402

try:  # check 3 needs `ckpt serve-flags` (issue 5)
    import serve_check  # noqa: E402
except ImportError:  # pragma: no cover - older checkout
    serve_check = None


@dataclass
class Cell:
    """One check on one case: agree / disagree / n/a, a short text for the table, and the details behind it."""

    status: str  # "ok", "DIFF", "n/a"
    text: str
    details: list[str] = field(default_factory=list)


@dataclass
class Row:
    case: Case
    vllm: str
    ckpt: str
    cells: dict[str, Cell]


CHECKS = ("method", "modules", "serve")


# ---- ckpt's side --------------------------------------------------------------------------------------------------


def ckpt_view(folder: Path):  # noqa: ANN201 - Analysis | str
    try:
        return analyze(str(folder), headers_only=True)
    except CkptError as exc:
        return str(exc)


def ckpt_refusal(result) -> str | None:  # noqa: ANN001
    """ckpt's statement that vLLM refuses the checkpoint's config: the detection's rejection, an unreadable config
    (CK104 invalid-config), or a target ckpt cannot open at all."""
    if isinstance(result, str):
        return result
    if result.detection.rejection:
        return result.detection.rejection
    for f in result.report.findings:
        if f.code == "CK104" and (f.details or {}).get("kind") == "invalid-config":
            return f.message
    return None


def _core(message: str) -> str:
    """The part of an error message both sides should share: no exception class, the first 60 characters."""
    text = message.split(": ", 1)[1] if message.split(": ", 1)[0].endswith(("Error", "Exception")) else message
    return " ".join(text.split())[:60]


# ---- check 1: method ----------------------------------------------------------------------------------------------


def vllm_refusal(verdict: vs.Verdict, build: vs.ModelBuild | None) -> str | None:
    if verdict.error:
        return verdict.error
    if build is not None:
        bad = next((d for d in build.decisions.values() if d.kind == "error"), None)
        if bad is not None:
            return f"layer {bad.prefix}: {bad.detail}"
    return None


def check_method(verdict: vs.Verdict, build: vs.ModelBuild | None, result) -> tuple[Cell, str, str]:  # noqa: ANN001
    v_ref = vllm_refusal(verdict, build)
    c_ref = ckpt_refusal(result)
    v_text = f"error: {v_ref}" if v_ref else (verdict.method or "unquantized")
    c_method = None if isinstance(result, str) else result.detection.vllm_quantization
    c_text = f"error: {c_ref}" if c_ref else (c_method or "unquantized")
    details = [f"vLLM: {v_text}", f"ckpt: {c_text}"]
    if v_ref and c_ref:
        same = _core(v_ref) in " ".join(c_ref.split())
        return Cell("ok", "both refuse" + ("" if same else " (message differs)"), details), _short(v_text), _short(c_text)
    if not v_ref and not c_ref and verdict.method == c_method:
        return Cell("ok", verdict.method or "unquantized"), _short(v_text), _short(c_text)
    return Cell("DIFF", f"{_short(c_text)} != {_short(v_text)}", details), _short(v_text), _short(c_text)


def _short(text: str, n: int = 28) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# ---- check 2: modules ---------------------------------------------------------------------------------------------


def ckpt_label(scheme) -> str:  # noqa: ANN001 - ckpt_tools.detect.schemes.Scheme
    if scheme.kind == "unknown":
        return "error"
    if not scheme.quantized:
        return "unquantized"
    return f"{scheme.kind} {scheme.activation}"


def vllm_label(build: vs.ModelBuild, prefix: str | None) -> str:
    if prefix is None:
        return "absent"
    d = build.decisions.get(prefix)
    if d is None:
        return "unquantized"  # built without the quant config: the layer is never offered to it
    if d.kind == "error":
        return "error"
    return "unquantized" if d.kind == "unquantized" else f"{d.kind} {d.activation}"


def check_modules(verdict: vs.Verdict, build: vs.ModelBuild | None, result) -> Cell:  # noqa: ANN001
    if isinstance(result, str):
        return Cell("n/a", "ckpt refused target")
    if verdict.error:
        return Cell("n/a", "vLLM refuses config")
    if build is None or verdict.method is None:
        rows = [r for r in result.detection.rows if r.declared.quantized]
        if rows:
            return Cell("DIFF", f"{len(rows)} quantized", [f"{r.name}: ckpt {ckpt_label(r.declared)}, vLLM unquantized"
                                                        for r in rows])
        return Cell("n/a", "unquantized")
    if build.error and not build.decisions:
        return Cell("n/a", "model not built", [build.error])
    rows = result.detection.rows
    bad, flagged = [], set()
    for r in rows:
        prefix = vs.vllm_prefix(build, r.name)
        want, got = vllm_label(build, prefix), ckpt_label(r.declared)
        if want == "absent" and (code := _flagged(result, r.name)):
            flagged.add(code)  # vLLM has no such layer and ckpt reports these tensors as an error: both refuse
            continue
        if want != got:
            bad.append(f"{r.name} -> {prefix or '(no vLLM layer)'}: ckpt {got}, vLLM {want}")
    if build.error:
        bad.append(f"model build stopped: {build.error}")
    agree = len(rows) - sum(1 for b in bad if not b.startswith("model build"))
    note = f" (no vLLM layer for some; flagged by {', '.join(sorted(flagged))})" if flagged else ""
    return Cell("ok" if not bad else "DIFF", f"{agree}/{len(rows)}{note}", bad)


def _flagged(result, module: str) -> str | None:  # noqa: ANN001
    """The code of an error finding that covers `module`: it names one of its tensors, or (findings list a sample of
    tensors) a rename plan moves its prefix (CK201 for a mis-nested tower)."""
    for f in result.report.findings:
        if f.severity != "error":
            continue
        renames = (f.details or {}).get("rename") or []
        if any(t.startswith(module + ".") for t in f.tensors) or any(
                isinstance(p, dict) and module.startswith(str(p.get("from"))) for p in renames):
            return f.code
    return None


# ---- the run ------------------------------------------------------------------------------------------------------


def judge(case: Case, workdir: Path) -> Row:
    try:
        folder = case.materialize(workdir)
    except Exception as exc:  # noqa: BLE001 - a recipe that no longer applies is a broken case, shown as such
        cell = Cell("DIFF", "case failed", [f"{type(exc).__name__}: {exc}"])
        return Row(case, "-", "-", {c: cell for c in CHECKS})
    result = ckpt_view(folder)
    verdict = vs.resolve(str(folder))
    build = vs.layer_decisions(str(folder)) if verdict.error is None and verdict.method else None
    method, v_text, c_text = check_method(verdict, build, result)
    cells = {"method": method, "modules": check_modules(verdict, build, result)}
    if serve_check is None:
        cells["serve"] = Cell("n/a", "no serve-flags")
    else:
        cells["serve"] = serve_check.check_serve(folder, result, verdict)
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
    return (f"vLLM {vs.VLLM_VERSION} conformance: {ok}/{len(total)} checks agree ({pct:.1f}%) over {len(rows)} "
            f"cases — {', '.join(parts)}"), clean


def table(rows: list[Row]) -> list[str]:
    head = ["case", "origin", "vLLM says", "ckpt says", *CHECKS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"{c.status} {c.text}".strip() if c.status != "n/a" else f"n/a ({c.text})" for c in
                 (r.cells[k] for k in CHECKS)]
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
    body = table(rows)
    print("\n".join(body))
    print()
    print(line)
    diffs = details(rows)
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
    ]
    if not args.only:
        args.out.write_text("\n".join(md))
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
