"""Markdown view, for pull-request comments and model cards."""

from __future__ import annotations

from .model import Report

ICONS = {"error": "❌", "warning": "⚠️", "info": "ℹ️"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(report: Report, *, color: bool = False) -> str:
    data = report.to_dict()
    ck = data["checkpoint"]
    s = data["summary"]
    lines = [
        f"## ckpt doctor: `{report.target}`",
        "",
        f"**{s['error']} error(s), {s['warning']} warning(s), {s['info']} info**",
        "",
        "| | |",
        "|---|---|",
        f"| producer | {ck['producer']} |",
        f"| quant_algo | {ck.get('quant_algo') or '—'} |",
        f"| vLLM `--quantization` | {ck.get('vllm_quantization') or '—'} |",
        f"| activation mode | {ck.get('activation_mode') or '—'} |",
        f"| architecture | {ck.get('architecture') or '—'} |",
        f"| shards / tensors | {ck['shards']} / {ck['tensors']:,} |",
        f"| KV cache | {ck.get('kv_cache') or '—'} |",
        f"| components | {', '.join(ck.get('components') or []) or '—'} |",
        "",
    ]
    findings = report.sorted_findings()
    if findings:
        lines += ["| | code | rule | message | fix |", "|---|---|---|---|---|"]
        for f in findings:
            fix = f"`{f.fix}`" if f.fix else ""
            lines.append(f"| {ICONS[f.severity]} | {f.code} | `{f.slug}` | {_cell(f.message)} | {fix} |")
        lines.append("")
        for f in findings:
            if f.tensors:
                more = f.count - len(f.tensors)
                lines.append(f"<details><summary>{f.code} {f.slug}: {f.count} affected</summary>\n")
                lines += [f"- `{t}`" for t in f.tensors]
                if more > 0:
                    lines.append(f"- … and {more} more")
                lines.append("\n</details>\n")
    else:
        lines.append("No findings.")
    return "\n".join(lines) + "\n"
