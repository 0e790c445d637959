"""Human-readable report: a checkpoint header, findings grouped by severity, a one-line summary. Lines longer than
the terminal are wrapped (`terminal_width`); JSON, Markdown and SARIF are never wrapped."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Sequence

from ..rules.base import Finding
from .model import Report, Unreadable

COLORS = {"error": "\033[31m", "warning": "\033[33m", "info": "\033[36m", "bold": "\033[1m", "dim": "\033[2m"}
RESET = "\033[0m"
SHOWN_TENSORS = 5


def _paint(text: str, style: str, color: bool) -> str:
    return f"{COLORS[style]}{text}{RESET}" if color else text


def human_size(n: float) -> str:
    """`1.5 GB`: decimal units, as file browsers and the Hub show sizes."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def activation_text(ck: dict) -> str:
    """What vLLM builds for the NVFP4 layers, and where it falls back to a weight-only kernel (no FP4 tensor cores)."""
    mode = ck["activation_mode"]
    kernels = ck.get("nvfp4_kernels") or {}
    fallback = [hw for hw, kernel in kernels.items() if mode == "W4A4" and "weight-only" in kernel]
    if fallback and len(fallback) < len(kernels):
        return f"{mode}; weight-only (Marlin) on {', '.join(fallback)}: no FP4 tensor cores"
    if fallback:
        return f"{mode} declared; runs weight-only (Marlin) on {', '.join(fallback)}: no FP4 tensor cores"
    return mode


def terminal_width() -> int | None:
    """The width text output wraps to: `COLUMNS` when set, else the terminal's width when stdout is one; None (no
    wrapping) when stdout is a pipe or a file, so `ckpt doctor ... | grep` still sees one finding per line."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        columns_now = os.get_terminal_size(sys.stdout.fileno()).columns if sys.stdout.isatty() else 0
    except (OSError, ValueError, AttributeError):
        return None
    # A pseudo-terminal that never had a size set (`script`, some CI runners, `docker run -t`) reports 0 columns.
    return columns_now if columns_now > 0 else None


def wrap(line: str, width: int | None, indent: int | None = None) -> list[str]:
    """`line` cut at spaces to `width` columns; continuation lines start at `indent` columns (default: the line's
    own indentation). Words longer than the width (tensor names, paths) are never split."""
    if width is None or len(line) <= width:
        return [line]
    lead = len(line) - len(line.lstrip(" ")) if indent is None else indent
    return textwrap.wrap(
        line,
        width=max(width, lead + 20),
        subsequent_indent=" " * lead,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [line]


HEADER_INDENT = 16  # where the header's values start ("  quantization  ...")


def header_indent(line: str) -> int:
    """Where a wrapped header line continues: under the value, or, on the kernels lines (one per GPU group, `on gb10:
    ...`), under the GPU group's kernels."""
    if line.startswith("  kernels ") or (line.startswith(" " * HEADER_INDENT) and line.lstrip().startswith("on ")):
        at = line.find(" on ")
        if at >= 0:
            return at + len(" on ")
    return HEADER_INDENT


def _uses_text(uses: list[dict]) -> str:
    parts = []
    for u in uses:
        kind = "expert" if u["layer"] == "moe" else "linear"
        kernel = u["kernel"] or "no kernel"
        parts.append(f"{u['modules']} {u['scheme']} {kind} -> {kernel}" + (" (slow fallback)" if u["fallback"] else ""))
    return "; ".join(parts)


def kernel_lines(ck: dict) -> list[str]:
    """The kernel each quantized class of modules gets, one line per GPU family (GPUs that get the same kernels
    share a line), under the runtime's release; or why there are none to give."""
    facts = ck.get("kernels") or {}
    by_hw = facts.get("hardware") or {}
    if facts and facts.get("vllm_version") is None and ck.get("vllm_quantization"):
        return [
            f"  kernels       not modelled for {facts['runtime']}: rules/kernels.toml restates vLLM "
            f"{facts['table_version']}'s selection only"
        ]
    if not by_hw:
        return []
    groups: dict[str, list[str]] = {}
    for hw, uses in by_hw.items():
        groups.setdefault(_uses_text(uses), []).append(hw)
    lines = [f"{', '.join(hws)}: {text}" for text, hws in groups.items()]
    head = f"  kernels       vLLM {facts['vllm_version']} on "
    return [head + lines[0], *(" " * (len(head) - 3) + "on " + line for line in lines[1:])]


def checkpoint_lines(ck: dict) -> list[str]:
    quant = "not quantized" if ck["producer"] == "none" else f"{ck['producer']} {ck.get('quant_algo') or ''}".strip()
    if ck.get("made_by"):
        quant += f" (written by {ck['made_by']})"
    vq = ck.get("vllm_quantization")
    lines = [
        f"  quantization  {quant}"
        + (f"  ->  vLLM --quantization {vq}" if vq else "  ->  vLLM rejects it" if ck["producer"] != "none" else "")
        + (f"  (activations: {activation_text(ck)})" if ck.get("activation_mode") else ""),
        f"  model         {ck.get('architecture') or 'unknown architecture'}"
        + (f" ({ck['model_type']})" if ck.get("model_type") else "")
        + f"; components: {', '.join(ck.get('components') or []) or 'none'}",
        f"  files         {ck['shards']} shard(s), {ck['tensors']:,} tensors, {human_size(ck['bytes'])}"
        + (f"; KV cache {ck['kv_cache']}" if ck.get("kv_cache") else ""),
    ]
    if ck.get("runtime"):
        lines.append(f"  runtime       {ck['runtime']}")
    return lines + kernel_lines(ck)


def hub_lines(hub: dict | None) -> list[str]:
    """Which commit of which Hub repo was read (nothing for a local target)."""
    if not hub:
        return []
    return [
        f"  hub           {hub['repo_id']} @ {hub['revision'] or 'default branch'} = commit {hub['commit']}"
        f" ({hub['endpoint']})"
    ]


def vllm_lines(vllm: dict | None) -> list[str]:
    """Which vLLM judged the load under `--vllm` (nothing without it)."""
    if not vllm:
        return []
    total = vllm.get("seconds", {}).get("total")
    took = f", {total:.1f} s" if isinstance(total, int | float) else ""
    return [f"  load judged   by {vllm['judged_by']}'s own loader on the meta device ({vllm['platform']}{took})"]


def finding_lines(f: Finding, width: int | None, color: bool = False) -> list[str]:
    """One finding as every text report shows it: severity, code and slug, then message, tensors, files and fix,
    and a blank line."""
    out = [f"{_paint(f.severity.upper().ljust(7), f.severity, color)} {f.code} {f.slug}"]
    out.extend(wrap(f"        {f.message}", width))
    if f.tensors:
        shown = ", ".join(f.tensors[:SHOWN_TENSORS])
        more = f.count - min(len(f.tensors), SHOWN_TENSORS)
        line = f"        tensors: {shown}" + (f" (+{more} more)" if more > 0 else "")
        out.extend(_paint(part, "dim", color) for part in wrap(line, width, 17))
    if f.files:
        files = ", ".join(f.files[:5]) + (f" (+{len(f.files) - 5} more)" if len(f.files) > 5 else "")
        out.extend(_paint(part, "dim", color) for part in wrap(f"        files: {files}", width, 15))
    if f.fix:
        out.extend(wrap(f"        fix: {f.fix}", width, 13))
    out.append("")
    return out


def render(report: Report, *, color: bool = False, width: int | None = -1) -> str:
    """The text report; `width`: the column to wrap long lines at (-1: `terminal_width()`, None: never)."""
    if width == -1:
        width = terminal_width()
    data = report.to_dict()
    out = [_paint(f"ckpt {report.command} {report.target}", "bold", color)]
    for line in checkpoint_lines(data["checkpoint"]) + hub_lines(data.get("hub")) + vllm_lines(data.get("vllm")):
        out.extend(wrap(line, width, header_indent(line)))
    out.append("")
    findings = report.sorted_findings()
    for f in findings:
        out += finding_lines(f, width, color)
    by_reason: dict[str, list[str]] = {}  # one line per reason: a pointer checkout skips most rules for one cause
    for s in report.skipped:
        by_reason.setdefault(s["reason"], []).append(f"{s['code']} {s['slug']}")
    for reason, rules in by_reason.items():
        out.extend(_paint(part, "dim", color) for part in wrap(f"skipped {', '.join(rules)}: {reason}", width, 2))
    for s in report.suppressed:
        line = f"suppressed {s['code']} {s['slug']}: {s['reason']}"
        out.extend(_paint(part, "dim", color) for part in wrap(line, width, 2))
    summary = data["summary"]
    if not findings:
        out.append(_paint("No findings.", "bold", color))
    out.append(f"{summary['error']} error(s), {summary['warning']} warning(s), {summary['info']} info")
    return "\n".join(out) + "\n"


def render_many(reports: Sequence[Report | Unreadable], *, color: bool = False) -> str:
    """The reports one after another; a target that could not be read says so in its place."""
    return "\n".join(
        f"ckpt {r.command} {r.target}\n  could not be read: {r.error}\n"
        if isinstance(r, Unreadable)
        else render(r, color=color)
        for r in reports
    )
