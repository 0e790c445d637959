"""Human-readable report: a checkpoint header, findings grouped by severity, a one-line summary."""

from __future__ import annotations

from .model import Report

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
    return lines


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


def render(report: Report, *, color: bool = False) -> str:
    data = report.to_dict()
    out = [_paint(f"ckpt {report.command} {report.target}", "bold", color)]
    out.extend(checkpoint_lines(data["checkpoint"]))
    out.extend(hub_lines(data.get("hub")))
    out.extend(vllm_lines(data.get("vllm")))
    out.append("")
    findings = report.sorted_findings()
    for f in findings:
        out.append(f"{_paint(f.severity.upper().ljust(7), f.severity, color)} {f.code} {f.slug}")
        out.append(f"        {f.message}")
        if f.tensors:
            shown = ", ".join(f.tensors[:SHOWN_TENSORS])
            more = f.count - min(len(f.tensors), SHOWN_TENSORS)
            out.append(_paint(f"        tensors: {shown}" + (f" (+{more} more)" if more > 0 else ""), "dim", color))
        if f.files:
            files = ", ".join(f.files[:5]) + (f" (+{len(f.files) - 5} more)" if len(f.files) > 5 else "")
            out.append(_paint(f"        files: {files}", "dim", color))
        if f.fix:
            out.append(f"        fix: {f.fix}")
        out.append("")
    by_reason: dict[str, list[str]] = {}  # one line per reason: a pointer checkout skips most rules for one cause
    for s in report.skipped:
        by_reason.setdefault(s["reason"], []).append(f"{s['code']} {s['slug']}")
    for reason, rules in by_reason.items():
        out.append(_paint(f"skipped {', '.join(rules)}: {reason}", "dim", color))
    out.extend(_paint(f"suppressed {s['code']} {s['slug']}: {s['reason']}", "dim", color) for s in report.suppressed)
    summary = data["summary"]
    if not findings:
        out.append(_paint("No findings.", "bold", color))
    out.append(f"{summary['error']} error(s), {summary['warning']} warning(s), {summary['info']} info")
    return "\n".join(out) + "\n"
