from __future__ import annotations

from collections.abc import Iterable

from ...rules.base import Finding
from .base import ServeCheck, ServeContext, parse_int, register


@register
class BatchedTokensAboveLimit(ServeCheck):
    """--max-num-batched-tokens above the runtime's compile range or the hardware's limit.

    What it catches
    A prefill budget above the runtime's compile-range ceiling (`compile_range_max_batched_tokens`) or the hardware
    profile's `max_num_batched_tokens_max`.

    Why it matters
    Past the compiled range prefill falls back to eager, and the activation memory presses unified memory at load;
    chunked prefill keeps full context anyway.

    Anti-pattern
    --max-num-batched-tokens 65536 ('bigger prefill budget = faster').

    Fix
    Use the hardware profile's value (16384 on GB10), given with the finding.

    Source
    the AEON-7 Qwen3.6-35B-A3B NVFP4 model card (DO NOT UNDO 3)
    """

    code = "CS171"
    slug = "batched-tokens-above-limit"
    severity = "warning"
    title = "--max-num-batched-tokens above the hardware or compile-range limit"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        hw = ctx.hw
        tokens = ctx.value("--max-num-batched-tokens")
        if tokens is None:
            return
        try:
            n = parse_int(tokens, "human_int")
        except ValueError:
            return
        ceiling = ctx.rt.serve.compile_range_max_batched_tokens
        hw_max = hw.max_num_batched_tokens_max if hw else None
        limit = min(x for x in (ceiling, hw_max, float("inf")) if x is not None)
        if n <= limit:
            return
        reason = (
            f"the compile-range ceiling of {ctx.rt.name} ({ceiling}): prefill falls back to eager"
            if hw is None or (ceiling and n > ceiling)  # without a profile the limit is the ceiling
            else f"{hw.id}'s limit {hw_max}: activation memory presses unified memory at load"
        )
        yield self.finding(
            f"--max-num-batched-tokens {tokens} exceeds {reason}",
            fix=ctx.planned("--max-num-batched-tokens"),
        )
