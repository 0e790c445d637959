from __future__ import annotations

from collections.abc import Iterable

from .base import Context, Finding, Rule, register

FILE_KINDS = {
    "header-too-small",
    "header-too-large",
    "truncated",
    "invalid-utf8",
    "invalid-json",
    "nesting-too-deep",
    "invalid-schema",
    "duplicate-field",
    "unknown-dtype",
    "invalid-offset",
    "shape-overflow",
    "invalid-span",
    "misaligned-slice",
    "incomplete-buffer",
    "duplicate-key",
    "unreadable",
    "invalid-index",
    "invalid-config",
}


@register
class InvalidHeader(Rule):
    """A file is not a valid safetensors file (or a config/index is not valid JSON).

    What it catches
    Everything the safetensors reader rejects (`safetensors/src/tensor.rs`, `SafeTensors::read_metadata`): a header
    length over 100,000,000 bytes or past the end of the file, a header that is not a UTF-8 JSON object (or nests
    128 levels deep, or holds a number beyond f64), a tensor entry that repeats a field (two `dtype` keys) or a
    repeated `__metadata__`, an unknown dtype, a shape or offset that is not an unsigned 64-bit integer (`-0`
    included), offsets with a gap or overlap, a shape whose element count overflows 64 bits, a byte span that does
    not equal shape x dtype size, a data region that does not end exactly at the end of the file (truncated
    download or trailing bytes). Also duplicate tensor names (warning: the format forbids them but the reader keeps
    the last) and unreadable config.json / hf_quant_config.json / index files.

    Why it matters
    vLLM fails at load with `SafetensorError: Error while deserializing header: ...`, usually after minutes of
    start-up; a truncated file is the classic result of an interrupted download.

    Anti-pattern
    Copying shards while a download is still running, editing headers by hand, or padding a header with NUL bytes
    instead of spaces.

    Fix
    Download the file again (compare its size and sha256 with the Hub's), or re-export it.
    """

    code = "CK104"
    slug = "invalid-header"
    severity = "error"
    title = "Invalid safetensors header or unreadable config"

    def check(self, ctx: Context) -> Iterable[Finding]:
        for problem in ctx.ckpt.problems:
            if problem.kind not in FILE_KINDS:
                continue
            severity = "warning" if problem.kind == "duplicate-key" else "error"
            yield self.finding(
                f"{problem.file}: {problem.message}.",
                files=[problem.file],
                tensors=[problem.tensor] if problem.tensor else [],
                count=1,
                severity=severity,
                details={"kind": problem.kind},
            )
