"""What scale-shape-mismatch (CK403) and packed-layout-mismatch (CK404) share: one finding per (tensor suffix,
problem kind), naming the modules and a few examples, worded the same way."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from .base import Context, Finding, Rule, module_files

# How each problem kind reads after "N quantized module(s) ..."; a rule adds the kinds of its own.
WHAT = {
    "missing": "lack `{suffix}`",
    "dtype": "have a `{suffix}` of the wrong dtype",
    "shape": "have a `{suffix}` of the wrong shape",
}


def layout_findings(
    rule: Rule,
    ctx: Context,
    grouped: Mapping[tuple[str, str], Sequence[tuple[str, str]]],
    what: Mapping[str, str],
    consequence: str,
) -> Iterator[Finding]:
    """`grouped`: (suffix, kind) -> [(module, detail)]; `what`: kind -> phrase (`{suffix}` filled in);
    `consequence`: what vLLM does with such modules."""
    for (suffix, kind), items in sorted(grouped.items()):
        modules = [m for m, _ in items]
        yield rule.finding(
            f"{len(modules)} quantized module(s) {what[kind].format(suffix=suffix)} (e.g. `{modules[0]}`: "
            f"{items[0][1]}); {consequence} Re-export these modules with the producer.",
            tensors=[f"{m}.{suffix}" for m in modules] if kind != "missing" else modules,
            files=module_files(ctx.ckpt, modules),
            details={"tensor": suffix, "problem": kind, "examples": dict(items[:20])},
        )
