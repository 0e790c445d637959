"""Markdown view, for pull-request comments and model cards (GitHub-flavoured: tables and <details>)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from .model import Report, Unreadable

ICONS = {"error": "❌", "warning": "⚠️", "info": "ℹ️"}
SHOWN_FILES = 10


def _cell(text: str) -> str:
    """Text safe inside a table cell: no row breaks, no column breaks, no raw HTML."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")


def _code(text: str) -> str:
    """An inline code span that survives backticks in the text (CommonMark: a longer fence, padded)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _verdict(summary: dict[str, int]) -> str:
    if summary["error"]:
        return f"❌ **{summary['error']} error(s)**, {summary['warning']} warning(s), {summary['info']} info"
    if summary["warning"]:
        return f"⚠️ **{summary['warning']} warning(s)**, {summary['info']} info"
    return f"✅ **no errors or warnings**, {summary['info']} info"


def _no_method(ck: dict) -> str:
    return "— (not quantized)" if ck.get("producer") == "none" else "— (vLLM rejects it)"


def render(report: Report, *, color: bool = False) -> str:
    data = report.to_dict()
    ck = data["checkpoint"]
    lines = [
        f"## ckpt {report.command}: {_code(report.target)}",
        "",
        _verdict(data["summary"]),
        "",
        "| | |",
        "|---|---|",
        f"| producer | {_cell(str(ck['producer']))} |",
        f"| quant_algo | {_cell(ck.get('quant_algo') or '—')} |",
        f"| vLLM `--quantization` | {_cell(ck.get('vllm_quantization') or _no_method(ck))} |",
        f"| activation mode | {_cell(ck.get('activation_mode') or '—')} |",
        f"| architecture | {_cell(ck.get('architecture') or '—')} |",
        f"| shards / tensors | {ck['shards']} / {ck['tensors']:,} |",
        f"| KV cache | {_cell(ck.get('kv_cache') or '—')} |",
        f"| components | {_cell(', '.join(ck.get('components') or []) or '—')} |",
        "",
    ]
    findings = report.sorted_findings()
    if findings:
        lines += ["| | code | rule | message | fix |", "|---|---|---|---|---|"]
        for f in findings:
            fix = _code(f.fix).replace("|", "\\|") if f.fix else ""  # GFM tables need \| even in code spans
            lines.append(f"| {ICONS[f.severity]} | {f.code} | {_code(f.slug)} | {_cell(f.message)} | {fix} |")
        lines.append("")
        for f in findings:
            if not (f.tensors or len(f.files) > 1):
                continue
            lines.append(f"<details><summary>{f.code} {f.slug}: {max(f.count, len(f.tensors))} affected</summary>\n")
            if f.files:
                shown = ", ".join(_code(n) for n in f.files[:SHOWN_FILES])
                extra = f" and {len(f.files) - SHOWN_FILES} more" if len(f.files) > SHOWN_FILES else ""
                lines += [f"Files: {shown}{extra}", ""]
            lines += [f"- {_code(t)}" for t in f.tensors]
            if f.count > len(f.tensors):
                lines.append(f"- … and {f.count - len(f.tensors)} more")
            lines.append("\n</details>\n")
    else:
        lines.append("No findings.")
        lines.append("")
    by_reason: dict[str, list[str]] = {}
    for s in report.skipped:
        by_reason.setdefault(s["reason"], []).append(s["code"])
    for reason, codes in by_reason.items():
        lines.append(f"_Not run: {', '.join(codes)} ({_cell(reason)})._")
    return "\n".join(lines).rstrip("\n") + "\n"


def render_many(reports: Sequence[Report | Unreadable], *, color: bool = False) -> str:
    """The reports one after another; a target that could not be read says so in its place."""
    return "\n".join(
        f"## ckpt {r.command}: `{r.target}`\n\n**could not be read**: {r.error}\n"
        if isinstance(r, Unreadable)
        else render(r, color=color)
        for r in reports
    )
