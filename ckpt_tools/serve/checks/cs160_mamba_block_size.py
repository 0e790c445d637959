from __future__ import annotations

from collections.abc import Iterable

from ...knowledge.serving import serving
from ...rules.base import Finding
from .base import ServeCheck, ServeContext, register


@register
class MambaBlockSize(ServeCheck):
    """--mamba-block-size without prefix caching, or on a family whose cache geometry vLLM derives.

    What it catches
    --mamba-block-size with --no-enable-prefix-caching or without --enable-prefix-caching (vLLM raises unless
    prefix caching ends up enabled), or set at all on hybrid families whose geometry vLLM derives (a warning; the
    family's `prefix_caching` in rules/serving.toml).

    Why it matters
    '--mamba-block-size can only be set with --enable-prefix-caching'; a hand-set value can confuse the hybrid
    cache config.

    Anti-pattern
    --mamba-block-size 256 copied from a 2026-06 benchmark recipe.

    Fix
    Remove it: vLLM sizes the hybrid cache blocks itself.

    Source
    vllm/config/multimodal.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §7.4); the AEON-7 Qwen3.6-35B-A3B NVFP4
    model card (DO NOT UNDO 5)
    """

    code = "CS160"
    slug = "mamba-block-size"
    severity = "error"
    title = "--mamba-block-size without prefix caching, or where vLLM derives it"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        if ctx.cmd.last("--mamba-block-size") is None:
            return
        prefix = ctx.cmd.last("--enable-prefix-caching")
        if prefix is not None and prefix.negated:
            yield self.finding(
                "--mamba-block-size with --no-enable-prefix-caching: vLLM raises "
                "'--mamba-block-size can only be set with --enable-prefix-caching'",
                fix="remove --mamba-block-size",
            )
        elif prefix is None:
            yield self.finding(
                "--mamba-block-size without --enable-prefix-caching: vLLM raises unless prefix caching ends up enabled",
                fix="remove --mamba-block-size",
            )
        elif _family_prefix_caching(ctx):
            yield self.finding(
                "--mamba-block-size on a family whose hybrid cache geometry vLLM derives: "
                "unnecessary, and it can confuse the cache config",
                fix="remove --mamba-block-size",
                severity="warning",
            )


def _family_prefix_caching(ctx: ServeContext) -> bool:
    fam = serving().family(ctx.facts.architecture, ctx.facts.model_type)
    return fam is not None and fam.prefix_caching
